"""heuristics in compat: datatrove decides as datatrove 0.10's filters do.

datatrove's own filter test cases run through our stage (the real stage on Arrow batches); the
word splitter gives spaCy's English tokens and sentences on real text; the repetition measures
follow datatrove's definitions on documents batched together."""
import random
from collections import Counter
from importlib import metadata

import numpy as np
import pyarrow as pa
import pytest

from pipeline.stages.heuristics import (
    Heuristics,
    HeuristicsConfig,
    _doc_bits,
    _duplicate_ngram_chars_dt,
    _mix64,
    _NgramHashes,
    _top_ngram_chars_dt,
)
from pipeline.stages.heuristics.spacy_words import english_words

# Every rule off (as the benchmark sets it); a case turns on the filter it tests.
from scripts.benchmarks.bench_heuristics_compat import RULES_OFF as OFF

GOPHER_REPETITION = dict(max_dup_line_fraction=0.3, max_dup_para_fraction=0.3, max_dup_line_char_fraction=0.2,
                         max_dup_para_char_fraction=0.2, top_ngram_max_fraction={2: 0.2, 3: 0.18, 4: 0.16},
                         dup_ngram_max_fraction={5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10})
# GopherQualityFilter(min_doc_words=10, max_doc_words=1000), as datatrove's test builds it.
GOPHER_QUALITY = dict(min_words=10, max_words=1000, min_avg_word_length=3, max_avg_word_length=10,
                      max_symbol_word_ratio=0.1, max_bullet_lines_ratio=0.9, max_ellipsis_lines_ratio=0.3,
                      min_alpha_words_ratio=0.8, min_stop_words=2)
C4 = dict(c4_lines=True, c4_min_sentences=5, c4_lorem_ipsum=True, c4_curly_braces=True)

# The texts and expected outcomes below are datatrove's (huggingface/datatrove,
# tests/pipeline/filters/test_filters.py at commit 6b08bd2a5370e7ca532fda3edae76df5b5262ffe,
# Apache-2.0; the two empty-document Gopher cases are from commit 0e9fe324c7b4da36dc33d92caffa623cc39a58cc).
# Each case: (config, text, datatrove's reason or None for kept, the rule of ours that names it).
TEXT_LF_1 = (
    "I wish it need not have happened in my time,' said Frodo. 'So do I,' said Gandalf, 'and so do all who live to "
    "see such times. But that is not for them to decide. All we have to decide is what to do with the time that is "
    "given us.'"
)
CASES = [
    # test_gopher_repetition
    (GOPHER_REPETITION, "I am your father.\n" * 4, "dup_line_frac", "gopher_dup_lines"),
    (GOPHER_REPETITION, "I am your father.\n\n" * 4, "dup_para_frac", "gopher_dup_paragraphs"),
    (
        GOPHER_REPETITION,
        "I am groot.\n\n" + "You are a wizard.\n\n" + "I am your father.\n\n" + f"{'x' * 30}.\n\n" * 2,
        "dup_para_char_frac",
        "gopher_dup_paragraph_chars",
    ),
    (
        GOPHER_REPETITION,
        "I am groot.\n" + "You are a wizard.\n" + "I am your father.\n" + f"{'x' * 40}.\n" * 2,
        "dup_line_char_frac",
        "gopher_dup_line_chars",
    ),
    (GOPHER_REPETITION, "I am Frank, I am Frank, I am Frank", "top_2_gram", "gopher_top_2gram"),
    (
        GOPHER_REPETITION,
        "I am Frank, you are Jhon. I am Frank. I am Frank you are Jhon",
        "top_3_gram",
        "gopher_top_3gram",
    ),
    (GOPHER_REPETITION, "I am a solo traveller " * 4 + TEXT_LF_1, "duplicated_5_n_grams", "gopher_dup_5gram"),
    # test_gopher_repetition_rejects_empty_doc
    (GOPHER_REPETITION, "", "empty", "empty"),
    # test_gopher_quality
    (GOPHER_QUALITY, "I am too small...", "gopher_short_doc", "too_few_words"),
    (GOPHER_QUALITY, "I am " * 20, "gopher_below_avg_threshold", "gopher_avg_word_length"),
    (GOPHER_QUALITY, "interconnection " * 20, "gopher_above_avg_threshold", "gopher_avg_word_length"),
    (GOPHER_QUALITY, "# comment " * 20, "gopher_too_many_hashes", "gopher_symbol_word_ratio"),
    (GOPHER_QUALITY, "... comment " * 20, "gopher_too_many_ellipsis", "gopher_symbol_word_ratio"),
    (
        GOPHER_QUALITY,
        "the ./!*?<><> apple <?////> orange  ++ interconnection !<>??? have" * 20,
        "gopher_below_alpha_threshold",
        "gopher_alpha_words",
    ),
    (GOPHER_QUALITY, TEXT_LF_1, None, None),
    # test_gopher_quality_rejects_empty_doc (GopherQualityFilter(min_doc_words=None))
    ({**GOPHER_QUALITY, "min_words": 0}, "", "empty", "empty"),
    ({**GOPHER_QUALITY, "min_words": 0}, "   \n  \n", "empty", None),
    # TestC4QualityFilter
    (
        C4,
        "This is a well-written paragraph with several sentences.\n"
        "The content continues with more good information here.\n"
        "Another important point is being made in this line.\n"
        "We can see that this document has quality content.\n"
        "Finally, the conclusion wraps everything up nicely.\n"
        "An additional sentence to ensure we pass the threshold.",
        None,
        None,
    ),
    (
        C4,
        "This is a sentence with lorem ipsum dolor sit amet.\n"
        "Another sentence with proper punctuation.\n"
        "More content to fill out the document.\n"
        "Even more content is needed to pass the check.\n"
        "The final sentence of the document.",
        "lorem_ipsum",
        "c4_lorem_ipsum",
    ),
    (
        C4,
        "This is some code with a { bracket.\n"
        "Another sentence follows this one.\n"
        "More content to fill out the document.\n"
        "Even more content is needed to pass.\n"
        "The final sentence of the document.",
        "curly_bracket",
        "c4_curly_braces",
    ),
    (C4, "Just one sentence.", "too_few_sentences", "c4_too_few_sentences"),
    # TestFineWebQualityFilter
    (dict(fineweb=True), "", "empty", "fineweb_empty"),
    (
        dict(fineweb=True, fineweb_line_punct_thr=0.5),
        "No punctuation here\nAnother line without any\nStill nothing",
        "line_punct_ratio",
        "fineweb_line_punct_ratio",
    ),
    (
        dict(fineweb=True, fineweb_short_line_thr=0.5, fineweb_short_line_length=30, fineweb_line_punct_thr=0.0),
        "hi.\nbye.\nok.\nno.\nyes.",
        "short_line_ratio",
        "fineweb_short_line_ratio",
    ),
    (
        dict(fineweb=True),
        "This is a well-written paragraph that ends with proper punctuation.\n"
        "The content here is substantial and has meaningful information.\n"
        "Quality filtering ensures that only the best documents pass through.\n"
        "Each line here is long enough and ends with a terminal punctuation mark.\n"
        "This document should pass all the quality checks applied by the filter.",
        None,
        None,
    ),
    # test_rejects_list_heavy_doc asserts only that the document goes.
    (dict(fineweb=True, fineweb_new_line_ratio=0.1), "\n".join(["a"] * 50), "removed", None),
]


def _table(texts):
    return pa.table({"id": [str(i) for i in range(len(texts))], "text": pa.array(texts, pa.string())})


def _stage(compat="datatrove", **options):
    stage = Heuristics(HeuristicsConfig(**{**OFF, **options, "compat": compat}), None)
    stage.setup()
    return stage


def test_datatrove_filter_test_cases_get_datatrove_decisions():
    """Each of datatrove's cases, alone in a batch and all in one batch per config: removed when
    datatrove removes it and kept otherwise, and the rule of ours named after datatrove's reason
    is among those that fire."""
    by_config: dict[str, list] = {}
    for cfg, text, reason, rule in CASES:
        by_config.setdefault(repr(sorted(cfg.items())), []).append((cfg, text, reason, rule))
    for cases in by_config.values():
        stage = _stage(**cases[0][0])
        out = stage.process(_table([c[1] for c in cases]))
        rules, _, _ = stage.evaluate(pa.array([c[1] for c in cases], pa.string()))
        fired = {name: np.asarray(mask, bool) for name, mask in rules}
        for i, (_, text, reason, rule) in enumerate(cases):
            assert (out["_reason"][i].as_py() is None) == (reason is None), (text[:40], reason, out["_reason"][i])
            if rule is not None:
                assert fired[rule][i], (text[:40], rule)
            alone = stage.process(_table([text]))
            assert alone["_reason"][0].as_py() == out["_reason"][i].as_py()


def test_c4_policy_lines_go_from_the_text():
    # datatrove's test_removes_policy_lines_from_text: C4QualityFilter(min_num_sentences=-1,
    # min_words_per_line=-1).
    stage = _stage(
        c4_lines=True, c4_min_sentences=0, c4_min_words_per_line=0, c4_lorem_ipsum=True, c4_curly_braces=True
    )
    out = stage.process(_table(["This site uses cookies for tracking.\nAnother valid line here today."]))
    assert out["_reason"][0].as_py() is None
    assert out["text"][0].as_py() == "Another valid line here today."


def _doc_texts():
    """Documentation pages from installed packages' metadata (reST and Markdown)."""
    texts = []
    for name in (
        "numpy",
        "pyarrow",
        "pydantic",
        "tokenizers",
        "datasets",
        "spacy",
        "presidio-analyzer",
        "ray",
        "scipy",
        "matplotlib",
        "faker",
        "zstandard",
    ):
        try:
            body = metadata.metadata(name).get_payload() or ""
        except metadata.PackageNotFoundError:
            continue
        if len(body) > 500:
            texts.append(body)
    assert len(texts) >= 6
    return texts


TRICKY = [
    "The cross-sectional study's results (n=12) e.g. U.S. don't std::env::set_var computer’s mTOR‑mediated 3.5% "
    "10-20 mg/kg... http://x.org/a?b=1 foo@bar.com",
    "Hello, world! (e.g., this) 10km. 5mg/kg $100 US$5 ...and..more «quote» 'single' \"double\" can't I'm 3pm. A.B.",
    "a--b 1--2 x---y ——z word/e.g. hi:) :) (: ''quoted'' ``code`` a.B °F. 20°C. ABC. 5$. 192.168.0.1/admin",
    "  leading\tand\u00a0odd   whitespace \n\n trailing  ",
    "",
    "   ",
]


def test_words_are_spacy_english_tokens(english_texts):
    import spacy

    nlp = spacy.blank("en")
    texts = english_texts[:200] + _doc_texts() + TRICKY
    ours = english_words().split(pa.array(texts)).to_lists()
    theirs = [[t.text.strip() for t in nlp.tokenizer(x) if t.text.strip()] for x in texts]
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not differ, [(texts[i][:80], ours[i][:20], theirs[i][:20]) for i in differ[:3]]


def test_sentences_are_spacy_sentencizer_sentences(english_texts):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    lines = [line.strip() for t in english_texts[:150] + _doc_texts()[:3] for line in t.splitlines() if line.strip()]
    lines += ["Hello.  ", "end.  )", "a.\t)", "One. Two! Three? four", "e.g. this. And", "", "   "]
    ours = english_words().sentences(pa.array(lines)).tolist()
    assert ours == [len(list(nlp(line).sents)) for line in lines]
    assert max(ours) > 5


def _mixed_documents(seed: int, n: int) -> list[str]:
    """Documents of words, abbreviations, citations and every kind of space and line break."""
    rng = random.Random(seed)
    pieces = [
        "word",
        "Dr.",
        "e.g.",
        "U.S.",
        "x",
        "12",
        "3.5",
        "(a)",
        "end.",
        "why?",
        "yes!",
        '"q."',
        "it's",
        "[1]",
        "[edit]",
        "{b}",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\r",
        "\x1c",
        "\x1f",
        "\x0b",
        "\u3000",
        "\u00a0",
        "\u2028",
        "\x85",
        "...",
        ".",
        "!",
        "-",
        "\u00e9t\u00e9.",
        "\u03b1-b",
        "can't.",
        ":)",
        "\u2019s",
    ]
    return [
        "".join(rng.choice(pieces) + (" " if rng.random() < 0.6 else "") for _ in range(rng.randint(0, 60)))
        for _ in range(n)
    ]


def test_kept_lines_count_the_sentences_spacy_finds_in_each_line_alone(english_texts):
    """C4's sentence count comes from the document's tokens, not from tokenizing the kept
    lines again: per document, the sum of spaCy's sentencizer over each kept line alone."""
    import spacy

    from pipeline.stages.heuristics import _c4_lines

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    cfg = HeuristicsConfig(**{**OFF, "compat": "datatrove", **C4})
    texts = english_texts[:150] + TRICKY + _mixed_documents(7, 300)
    batch = pa.array(texts)
    c4 = _c4_lines(batch, len(texts), cfg, english_words().split(batch))
    kept = [t.split("\n") if k else [] for t, k in zip(c4["text"].to_pylist(), c4["kept_per_doc"])]
    assert [len(lines) for lines in kept] == c4["kept_per_doc"].tolist() and sum(c4["kept_per_doc"]) > 500
    spacy_counts = [sum(len(list(nlp(line).sents)) for line in lines) for lines in kept]
    assert c4["sentences"].tolist() == spacy_counts
    # and the same counts as tokenizing the kept lines again, as the stage did before
    assert np.array_equal(c4["sentences"], _c4_lines(batch, len(texts), cfg, None)["sentences"])


def test_the_rules_are_those_of_spacy_blank_en():
    """The patterns and exceptions compiled are the ones spacy.blank("en") tokenizes with."""
    import spacy

    from pipeline.stages.heuristics.spacy_words import spacy_english_rules

    tok = spacy.blank("en").tokenizer
    rules = spacy_english_rules()
    assert rules.prefix_pattern == tok.prefix_search.__self__.pattern
    assert rules.suffix_pattern == tok.suffix_search.__self__.pattern
    assert rules.infix_pattern == tok.infix_finditer.__self__.pattern
    assert rules.rules == tok.rules and rules.url_match == tok.url_match and rules.token_match is None


def _walk(words, n):
    """datatrove's find_all_duplicate, as it defines it."""
    seen, chars, i = set(), 0, 0
    while i < len(words) - n + 1:
        gram = "".join(words[i : i + n])
        if gram in seen:
            chars += len(gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return chars


def _most_frequent(words, n):
    grams = [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0
    gram, count = Counter(grams).most_common(1)[0]
    return len(gram) * count


def test_repetition_measures_follow_datatrove_on_a_batch():
    """Documents with planted repeats (phrases, a title repeated in the text, runs of one
    phrase), measured together in one batch, each against datatrove's definitions."""
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(40)] + [",", ".", "(", ")"]
    texts = []
    for d in range(120):
        words = [rng.choice(vocab) for _ in range(rng.randint(0, 160))]
        for _ in range(rng.randint(0, 4)):  # copy a phrase elsewhere
            if len(words) > 20:
                a = rng.randrange(len(words) - 12)
                phrase = words[a : a + rng.randint(5, 12)]
                b = rng.randrange(len(words))
                words[b:b] = phrase * rng.randint(1, 3)
        texts.append(" ".join(words))
    texts.append("The title of this abstract has thirteen words in it for the test. " * 2 + "Then other words follow.")
    w = english_words().split(pa.array(texts))
    tokens = w.to_lists()
    n = len(texts)
    ids = _NgramHashes(_mix64(w.hashes()), w.doc, _doc_bits(n))
    for k in (2, 3, 4):
        top, _ = _top_ngram_chars_dt(ids, w.lengths, k, n)
        assert top.tolist() == [_most_frequent(t, k) for t in tokens]
    for k in (5, 6, 8, 10):
        dup, _ = _duplicate_ngram_chars_dt(w, k, n)
        assert dup.tolist() == [_walk(t, k) for t in tokens]
        assert sum(dup > 0) > 30


def test_compat_is_declared_and_checked():
    from pipeline.config import load_config

    for path in ("configs/pubmed.yaml", "configs/tiny.yaml"):
        assert load_config(path, check_inputs=False).stage("heuristics").config.compat == "medprep"
    assert HeuristicsConfig().compat == "medprep" and HeuristicsConfig().fineweb is False
    with pytest.raises(ValueError):
        HeuristicsConfig(compat="spacy")
    with pytest.raises(ValueError):
        HeuristicsConfig(fineweb_stop_chars=[".", "?!"])
