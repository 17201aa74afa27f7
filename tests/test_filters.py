"""Quality filters with the real models on real abstracts."""
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.config import load_config
from pipeline.stages.heuristics import Heuristics, HeuristicsConfig
from pipeline.stages.langid import LangIdConfig, LanguageId
from pipeline.stages.perplexity import Perplexity, PerplexityConfig
from pipeline.stages.toxicity import Toxicity, ToxicityConfig


def _table(texts):
    return pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})


def _stage(cls, cfg):
    s = cls(cfg, None)
    s.setup()
    return s


def _gibberish(seed, words=250):
    rng = random.Random(seed)
    return " ".join("".join(rng.choice("qwrtzpsdfghjklxcvbnm") for _ in range(rng.randint(3, 9))) for _ in range(words))


def _number_table(seed):
    rng = random.Random(seed)
    return "\n".join(" ".join(str(rng.randint(0, 9999)) for _ in range(8)) for _ in range(40))


BOILERPLATE = " ".join(
    ["Click here to subscribe to our newsletter. Terms of use. Privacy policy. All rights reserved."] * 12
)


def test_langid_removes_real_foreign_abstracts_and_keeps_english(real_docs):
    stage = _stage(LanguageId, LangIdConfig())
    table = stage.process(pa.Table.from_pylist(real_docs).select(["id", "text", "language"]))
    lang_of = {"ger": "de", "spa": "es", "ita": "it", "por": "pt", "dut": "nl", "fre": "fr", "chi": "zh"}
    foreign = table.filter(pc.is_in(table["language"], pa.array(list(lang_of))))
    assert foreign.num_rows >= 60
    assert foreign["_reason"].null_count == 0, "every foreign OtherAbstract is removed"
    # MEDLINE's language label is occasionally wrong (pmid 33529388: "fre", Spanish text).
    agree = sum(a == lang_of[b] for a, b in zip(foreign["lang"].to_pylist(), foreign["language"].to_pylist()))
    assert agree >= 0.95 * foreign.num_rows
    english = table.filter(pc.equal(table["language"], "eng"))
    assert english["_reason"].null_count >= 0.98 * english.num_rows
    assert set(table.column_names) >= {"lang", "lang_score"}


def test_perplexity_pushes_junk_far_above_real_abstracts(english_texts):
    stage = _stage(Perplexity, PerplexityConfig())
    real = np.array(stage.scores(pa.array(english_texts)))
    junk = np.array(stage.scores(pa.array([_gibberish(1), _number_table(2), BOILERPLATE])))
    assert junk.min() > 2 * np.percentile(real, 99)
    out = stage.process(_table(english_texts[:50] + [_gibberish(3)]))
    assert out["_reason"].to_pylist()[-1] == "perplexity_too_high"
    assert out["_reason"].null_count >= 49


def test_perplexity_buckets_from_reference_percentiles(english_texts):
    stage = _stage(Perplexity, PerplexityConfig(mode="buckets", keep_buckets=["head", "middle"]))
    out = stage.process(_table(english_texts[:200]))
    buckets = set(out["perplexity_bucket"].to_pylist())
    assert buckets <= {"head", "middle", "tail"} and "tail" in buckets
    removed = out.filter(pc.is_valid(out["_reason"]))
    assert set(removed["_reason"].to_pylist()) == {"perplexity_bucket_tail"}


def test_heuristics_remove_junk_keep_real_and_name_each_rule(english_texts):
    cfg = load_config("configs/pubmed.yaml").stage("heuristics").config
    stage = _stage(Heuristics, cfg)
    junk = {
        "gibberish_symbols": "#" * 20 + " " + " ".join(["@@ ## %% &&"] * 60),
        "repeated": BOILERPLATE,
        "short": "Too short to be a document.",
        "lorem": "Lorem ipsum dolor sit amet, " + english_texts[0],
        "lines": "\n".join(["the same line of text is here"] * 30),
    }
    out = stage.process(_table(english_texts + list(junk.values())))
    reasons = out["_reason"].to_pylist()
    real_removed = sum(r is not None for r in reasons[: len(english_texts)])
    assert real_removed <= 0.02 * len(english_texts)
    junk_reasons = dict(zip(junk, reasons[len(english_texts) :]))
    assert junk_reasons["short"] == "too_few_words"
    assert junk_reasons["lorem"] == "c4_lorem_ipsum"
    assert junk_reasons["lines"].startswith(("gopher_dup", "gopher_top"))
    assert junk_reasons["repeated"].startswith(("gopher_dup", "gopher_top"))
    assert junk_reasons["gibberish_symbols"] is not None
    assert {"n_words", "punct_fraction", "alpha_words_ratio", "avg_word_length"} <= set(out.column_names)


def test_heuristic_repetition_rules_match_their_definition():
    # 100 distinct words then the same 10-word sentence 5 times: a known duplicate fraction.
    base = " ".join(f"word{i}" for i in range(100))
    rep = " ".join(["alpha beta gamma delta epsilon zeta eta theta iota kappa"] * 5)
    text = base + " " + rep
    stage = Heuristics(
        HeuristicsConfig(min_words=0, min_stop_words=0, dup_ngram_max_fraction={5: 0.99}, top_ngram_max_fraction={}),
        None,
    )
    assert stage.process(_table([text]))["_reason"].to_pylist() == [None]
    dup_chars = sum(len(w) for w in rep.split()[10:])  # the 4 repeats, no spaces
    limit = dup_chars / len(text)
    stage = Heuristics(
        HeuristicsConfig(
            min_words=0, min_stop_words=0, dup_ngram_max_fraction={5: limit - 0.01}, top_ngram_max_fraction={}
        ),
        None,
    )
    assert stage.process(_table([text]))["_reason"].to_pylist() == ["gopher_dup_5gram"]
    stage = Heuristics(
        HeuristicsConfig(
            min_words=0, min_stop_words=0, dup_ngram_max_fraction={5: limit + 0.01}, top_ngram_max_fraction={}
        ),
        None,
    )
    assert stage.process(_table([text]))["_reason"].to_pylist() == [None]


_ONLY_C4 = dict(
    min_words=0,
    max_punctuation_fraction=1.0,
    min_avg_word_length=0,
    max_avg_word_length=1e9,
    max_symbol_word_ratio=1e9,
    min_alpha_words_ratio=0,
    min_stop_words=0,
    top_ngram_max_fraction={},
    dup_ngram_max_fraction={},
    max_dup_line_fraction=1,
    max_dup_para_fraction=1,
    max_dup_line_char_fraction=1e9,
    max_dup_para_char_fraction=1e9,
    c4_boilerplate_lines=False,
)


def test_c4_line_rules_drop_lines_rewrite_text_and_count_sentences():
    page = "\n".join(
        [
            "Home | About | Contact",  # no terminal punctuation
            "The study enrolled patients at two sites.[1]",  # citation removed, kept
            "Too short.",  # fewer than 3 words
            "Please enable JavaScript to use this site.",  # javascript line
            "This site uses cookies to improve your visit.",  # policy line
            "It ended without a conclusion...",  # ellipsis
            "Dr. Smith saw 40 patients, e.g. adults. Most improved. Some did not!",
            "  Results were reported in full.  ",
        ]
    )
    stage = Heuristics(HeuristicsConfig(**_ONLY_C4, c4_lines=True, c4_min_sentences=5), None)
    out = stage.process(
        _table(
            [
                page,
                page.replace("Most improved.", "Most improved. Lorem ipsum dolor sit."),
                page.replace("Most improved.", "Most improved {a}."),
                "Please enable JavaScript {now} for this site.\n" + page,
                page.replace("Most improved. Some did not!", "All improved."),
            ]
        )
    )
    assert out["_reason"].to_pylist() == [None, "c4_lorem_ipsum", "c4_curly_braces", None, "c4_too_few_sentences"]
    assert out["text"][0].as_py() == (
        "The study enrolled patients at two sites.\n"
        "Dr. Smith saw 40 patients, e.g. adults. Most improved. Some did not!\n"
        "Results were reported in full."
    )
    # "Dr." and "e.g." end no sentence (spaCy's tokenizer keeps them whole): 1 + 3 + 1.
    assert out["c4_sentences"].to_pylist()[0] == 5
    assert out["c4_lines_dropped"].to_pylist()[0] == 5
    # Words are counted as str.split() counts them, Unicode spaces included.
    nbsp = Heuristics(HeuristicsConfig(**_ONLY_C4, c4_lines=True), None).process(
        _table(["One\u00a0two\u00a0three.", "One\u00a0two."])
    )
    assert nbsp["_reason"].to_pylist() == [None, "c4_no_lines_left"]
    # Off by default: the text is left alone.
    plain = Heuristics(HeuristicsConfig(**_ONLY_C4), None).process(_table([page]))
    assert plain["text"][0].as_py() == page and plain["_reason"].to_pylist() == [None]


def test_c4_sentence_count_matches_spacy_sentencizer_on_real_abstracts(english_texts):
    # datatrove counts C4's sentences with spaCy's sentencizer on each line: ours counts them
    # from whitespace chunks in Arrow; on real abstracts the two agree.
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    texts = english_texts[:200]
    stage = Heuristics(HeuristicsConfig(**_ONLY_C4, c4_min_sentences=5), None)
    ours = stage.process(_table(texts))["c4_sentences"].to_pylist()
    ref = [sum(len(list(nlp(line.strip()).sents)) for line in t.splitlines() if line.strip()) for t in texts]
    assert sum(a == b for a, b in zip(ours, ref)) >= 0.93 * len(texts)
    assert sum((a >= 5) == (b >= 5) for a, b in zip(ours, ref)) >= 0.99 * len(texts)
    assert max(ref) > 5


def test_toxicity_scores_and_keeps_medical_vocabulary(english_texts):
    stage = _stage(Toxicity, ToxicityConfig())
    medical = [
        "Sexual dysfunction and penile prosthesis outcomes in men after radical prostatectomy.",
        "Cocaine and heroin use disorder among adolescents: a cohort study of overdose deaths.",
        "Gunshot wounds to the abdomen: damage control surgery in 120 trauma patients.",
    ]
    toxic = "you are a fucking idiot and a worthless piece of shit"
    out = stage.process(_table(english_texts[:200] + medical + [toxic]))
    reasons = out["_reason"].to_pylist()
    assert reasons[-1] == "toxic"
    assert all(r is None for r in reasons[:-1])
    assert out["toxicity"].type == pa.float32()


def test_words_are_split_like_str_split_in_any_batch(english_texts):
    """pyarrow's utf8_split_whitespace, on a string ending in whitespace (every abstract ending
    in "." once punctuation is spaced off), gave a stray token, sometimes different from run to
    run: a Ray run and a local one differed by one word. split_words is str.split, every time."""
    from pipeline.documents import split_words
    from pipeline.stages.heuristics import _WORD_SPLIT

    spaced = pc.replace_substring_regex(pa.array(english_texts[:500]), _WORD_SPLIT, r" \1 ")
    want = [s.split() for s in spaced.to_pylist()]
    assert sum(s.endswith(" ") for s in spaced.to_pylist()) > 100
    for _ in range(20):
        assert split_words(spaced).to_pylist() == want
