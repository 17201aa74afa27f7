"""decontaminate: documents that share a word n-gram (13 words by default) with an item of a
benchmark the model will be scored on are removed with reason `contaminated` and
`duplicate_of` naming the benchmark and item (`pubmedqa:21645374`); in `mode: cut` only the
overlapping passages are cut out and the rest of the document is kept.

Both sides read text the same way: a benchmark's fields go through the normalize stage's
transform (`normalize_text`, with the chain's normalize options), and both are cut into words
by one definition (`Words`: maximal runs of letters and digits, RE2's [\\p{L}\\p{N}] as
ccnet_norm reads them, lowercased), so case, punctuation and whitespace do not hide an overlap.
Each word is hashed once per batch (xxh3-64 of its distinct forms), each n-gram is a 64-bit mix
of its words' hashes (the rolling hash of pipeline/engines/ngram_hash.py), computed for the whole
batch in n numpy passes.

A benchmark's passages (each string of its fields; a list field gives one passage per element)
are cut separately: no n-gram spans two passages. A passage shorter than n words gives no
n-gram, so short answers (`yes`, `no`) and short questions never match; an item with no
passage of n words cannot be detected and is counted as `items_too_short`.

Map with the set on the side: the driver builds each benchmark's sorted unique n-gram hashes
(8 bytes each) and the first item holding each (4 bytes), written to work/ once; every shard
task loads them (once per worker) and looks its n-grams up by binary search. The driver then
counts, per benchmark and source, the items whose n-grams were found.

A benchmark whose items are documents named by an id the corpus also carries (PubMedQA: PMIDs;
`match_column: pmid`) is matched by id too: a document whose column value is an item's id is
contaminated however much its text was rewritten. The stats count documents found each way."""
from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator, model_validator

from pipeline.documents import DUPLICATE_OF, with_reason
from pipeline.engines.ccnet_norm import letter_or_digit_bytes, string_buffers
from pipeline.engines.ngram_hash import RollingNgramHashes
from pipeline.engines.text_normalize import NormalizeOptions, normalize_text, tidy_whitespace
from pipeline.errors import InputError
from pipeline.runpath import load_npy, read_json, save_npy, write_json
from pipeline.stages.base import Dependencies, GlobalStage, StageConfig
from pipeline.tasks import rewrite_shard, shard_task

CONTAMINATED = "contaminated"
SOURCE = "source"
# Documents without a `source` column count as one source of this name.
ONE_SOURCE = "all"
BENCHMARK_SUFFIXES = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
# Benchmark passages per build chunk: bounds the build's temporaries for millions of items.
BUILD_CHUNK = 20_000
# Per benchmark, what the manifest quotes of the stage's stats.
MANIFEST_KEYS = ("items", "items_too_short", "items_found", "documents", "by_source")
# Bytes per benchmark n-gram in each worker: its hash (uint64) and its first item (int32).
BYTES_PER_NGRAM = 12
_WHITESPACE = np.frombuffer(b" \t\n", np.uint8)


class BenchmarkConfig(StageConfig):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path: str
    # The fields holding the text (a string, or a list of strings: one passage each).
    fields: list[str] = Field(min_length=1)
    # The field naming an item; by default a JSON object's keys, else the row number.
    id_field: str | None = None
    # A corpus column holding the same ids (PubMedQA's items are PubMed articles named by PMID:
    # `pmid`): a document whose value is an item's id is contaminated whatever its text.
    match_column: str | None = None

    @model_validator(mode="after")
    def _file_has_fields(self):
        path = Path(self.path)
        if path.suffix.lower() not in BENCHMARK_SUFFIXES:
            raise ValueError(f"{self.path}: a benchmark is JSONL, JSON or Parquet ({', '.join(BENCHMARK_SUFFIXES)})")
        if not path.is_file():
            raise ValueError(f"{self.path}: benchmark file not found")
        columns = benchmark_columns(path)
        wanted = self.fields + ([self.id_field] if self.id_field else [])
        missing = [f for f in wanted if f not in columns]
        if missing:
            raise ValueError(f"{self.path}: no field {', '.join(map(repr, missing))} (fields, id_field); "
                             f"its items have: {', '.join(columns)}")
        return self


class DecontaminateConfig(StageConfig):
    benchmarks: list[BenchmarkConfig] = Field(min_length=1)
    # Words per n-gram: an overlap of this many consecutive words is contamination.
    ngram: int = Field(default=13, ge=3, le=64)
    # remove: the document goes (reason `contaminated`); cut: the overlapping passages go.
    mode: Literal["remove", "cut"] = "remove"

    @field_validator("benchmarks")
    @classmethod
    def _distinct_names(cls, value):
        names = [b.name for b in value]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmark names must differ: {', '.join(names)}")
        return value


# ---- reading benchmarks ---------------------------------------------------------------------

def _json_records(path: Path) -> tuple[list[str] | None, list[dict]]:
    """A JSON benchmark: a list of items, or an object of items by id (PubMedQA's form)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()):
        return [str(k) for k in data], list(data.values())
    if isinstance(data, list) and all(isinstance(v, dict) for v in data):
        return None, data
    raise InputError(f"{path}: a JSON benchmark is a list of items or an object of items by id")


def benchmark_columns(path: Path) -> list[str]:
    """The fields of a benchmark file's items (read cheaply: a Parquet schema, a JSONL line)."""
    kind = BENCHMARK_SUFFIXES[path.suffix.lower()]
    if kind == "parquet":
        import pyarrow.parquet as pq
        return pq.read_schema(path).names
    if kind == "json":
        _, records = _json_records(path)
        return list(records[0]) if records else []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    return list(json.loads(line))
                except (ValueError, TypeError):
                    raise InputError(f"{path}:{number}: not a JSON object") from None
    return []


def load_benchmark(spec: BenchmarkConfig) -> tuple[list[str], pa.Array, np.ndarray]:
    """A benchmark's item ids, its passages (every string of its text fields) and the item of
    each passage."""
    path = Path(spec.path)
    kind = BENCHMARK_SUFFIXES[path.suffix.lower()]
    columns = spec.fields + ([spec.id_field] if spec.id_field else [])
    keys = None
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq
            table = pq.read_table(path, columns=columns)
        elif kind == "jsonl":
            import pyarrow.json as pj
            table = pj.read_json(path).select(columns)
        else:
            keys, records = _json_records(path)
            table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in records])
    except (pa.ArrowInvalid, KeyError) as exc:
        raise InputError(f"{path}: cannot be read as {kind}: {(str(exc).splitlines() or [''])[0]}") from None
    n = table.num_rows
    if spec.id_field:
        ids = pc.cast(table[spec.id_field], pa.string()).to_pylist()
    else:
        ids = keys if keys is not None else [str(i) for i in range(n)]
    passages, items = [], []
    for field in spec.fields:
        col = table[field].combine_chunks()
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            items.append(np.asarray(pc.list_parent_indices(col)))
            col = pc.list_flatten(col)
        else:
            items.append(np.arange(n))
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_null(col.type)):
            raise InputError(f"{path}: field '{field}' holds {col.type}, not text or a list of texts")
        passages.append(pc.cast(col, pa.string()))
    text = pa.concat_arrays(passages) if passages else pa.array([], pa.string())
    item = np.concatenate(items).astype(np.int64)
    valid = np.asarray(text.is_valid())
    return ids, text.filter(pa.array(valid)), item[valid]


# ---- words and n-grams: the one definition both sides use -------------------------------------

@dataclass
class Words:
    """A batch of texts cut into words: maximal runs of letters and digits (never across two
    documents), as byte spans [start, end) of the batch's UTF-8 buffer; `bounds[d]:bounds[d+1]`
    are document d's words; `hashes` the xxh3-64 of each word lowercased."""
    data: np.ndarray
    offsets: np.ndarray
    start: np.ndarray
    end: np.ndarray
    bounds: np.ndarray
    hashes: np.ndarray

    @classmethod
    def of(cls, text: pa.Array | pa.ChunkedArray) -> "Words":
        from xxhash import xxh3_64_intdigest
        if isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks() if text.num_chunks else pa.array([], text.type)
        offsets, data = string_buffers(pc.fill_null(text, ""))
        n = len(data)
        word = letter_or_digit_bytes(data) if n else np.zeros(0, bool)
        doc_start = np.zeros(n + 1, bool)
        doc_start[offsets] = True
        before = np.concatenate([[False], word[:-1]])
        after = np.concatenate([word[1:], [False]])
        start = np.flatnonzero(word & (~before | doc_start[:n]))
        end = np.flatnonzero(word & (~after | doc_start[1:])) + 1
        bounds = np.searchsorted(start, offsets)
        lengths = end - start
        spans = np.concatenate([[0], np.cumsum(lengths)])
        large = len(spans) and spans[-1] >= 2**31
        words = pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(start),
                                      [None, pa.py_buffer(spans.astype(np.int64 if large else np.int32)),
                                       pa.py_buffer(np.ascontiguousarray(data[word]))])
        encoded = pc.dictionary_encode(pc.utf8_lower(words))
        distinct = encoded.dictionary.cast(pa.large_binary() if large else pa.binary()).to_pylist()
        by_form = np.fromiter(map(xxh3_64_intdigest, distinct), np.uint64, len(distinct))
        hashes = by_form[np.asarray(encoded.indices)] if len(start) else np.zeros(0, np.uint64)
        return cls(data, offsets, start, end, bounds, hashes)

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.bounds)

    def ngrams(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every n-gram of every document: (64-bit hash, its first word, its document). A
        document of fewer than n words has none."""
        per_doc = np.maximum(self.counts - n + 1, 0)
        total = int(per_doc.sum())
        doc = np.repeat(np.arange(len(per_doc)), per_doc)
        first = np.repeat(self.bounds[:-1] - (np.cumsum(per_doc) - per_doc), per_doc) + np.arange(total)
        h = RollingNgramHashes(self.hashes).at(n)[first] if total else np.zeros(0, np.uint64)
        return h, first, doc


# ---- the benchmark side -----------------------------------------------------------------------

@dataclass
class BenchmarkSet:
    """One benchmark's n-grams: `ngrams` sorted unique hashes, `first_item` the first item (in
    file order) holding each; for the driver's item counts, `items` every (n-gram, item) pair's
    item, grouped by n-gram (`starts`)."""
    name: str
    ids: list[str]
    ngrams: np.ndarray
    first_item: np.ndarray
    items: np.ndarray | None = None
    starts: np.ndarray | None = None
    stats: dict | None = None
    cache_key: str | None = None          # cache/benchmarks/<key>, where the run's cache holds it

    @classmethod
    def build(cls, spec: BenchmarkConfig, n: int, normalize: NormalizeOptions) -> "BenchmarkSet":
        t0 = time.perf_counter()
        ids, passages, item_of = load_benchmark(spec)
        hashes, items, short = [], [], 0
        for lo in range(0, len(passages), BUILD_CHUNK):
            words = Words.of(normalize_text(passages.slice(lo, BUILD_CHUNK), normalize))
            h, _, doc = words.ngrams(n)
            short += int((words.counts < n).sum())
            hashes.append(h)
            items.append(item_of[lo + doc].astype(np.int32))
        h = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        item = np.concatenate(items) if items else np.zeros(0, np.int32)
        order = np.lexsort((item, h))
        h, item = h[order], item[order]
        pair = np.concatenate([[True], (h[1:] != h[:-1]) | (item[1:] != item[:-1])]) if len(h) else np.zeros(0, bool)
        h, item = h[pair], item[pair]
        new = np.concatenate([[True], h[1:] != h[:-1]]) if len(h) else np.zeros(0, bool)
        starts = np.concatenate([np.flatnonzero(new), [len(h)]])
        checkable = int(len(np.unique(item)))
        stats = {"items": len(ids), "passages": len(passages), "passages_shorter_than_ngram": short,
                 "items_too_short": len(ids) - checkable, "ngrams": int(new.sum()),
                 "build_seconds": round(time.perf_counter() - t0, 3)}
        return cls(spec.name, ids, h[new], item[new], item, starts, stats)

    def items_holding(self, ngram_index: np.ndarray) -> np.ndarray:
        """The distinct items holding any of the given n-grams (indices into `ngrams`)."""
        lo, hi = self.starts[ngram_index], self.starts[ngram_index + 1]
        sizes = hi - lo
        at = np.repeat(lo - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
        return np.unique(self.items[at])

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found, index into `ngrams`) for each hash: a binary search in the sorted set."""
        if not len(self.ngrams):
            return np.zeros(len(hashes), bool), np.zeros(len(hashes), np.int64)
        at = np.minimum(np.searchsorted(self.ngrams, hashes), len(self.ngrams) - 1)
        return self.ngrams[at] == hashes, at

    def save(self, folder) -> None:
        save_npy(folder / f"{self.name}.ngrams.npy", self.ngrams)
        save_npy(folder / f"{self.name}.first_item.npy", self.first_item)
        write_json(folder / f"{self.name}.ids.json", self.ids)

    @classmethod
    def cached(cls, spec: BenchmarkConfig, n: int, normalize: NormalizeOptions, cache: dict) -> "BenchmarkSet":
        """`build`, or what an earlier run of the same benchmark file, options and code built,
        from the run's cache (cache/benchmarks/<key>/; ctx.cache): a retune that reruns this
        stage reads the set instead of normalizing and hashing every item again. Benchmarks
        are public text, never a document of the corpus."""
        from pipeline.cache import DerivedCache
        from pipeline.digests import code_digest, digest, file_digest
        derived = DerivedCache.of(cache, "benchmarks")
        if derived is None:
            return cls.build(spec, n, normalize)
        folder = derived.folder(digest(code_digest(), file_digest(Path(spec.path)), spec.model_dump(), n,
                                       normalize.model_dump()))
        done, cache_key = folder / "set.json", derived.keys[-1]
        if done.exists():
            t0 = time.perf_counter()
            meta = read_json(done)
            arrays = {a: load_npy(folder / f"{a}.npy") for a in ("ngrams", "first_item", "items", "starts")}
            stats = {**meta["stats"], "build_seconds": round(time.perf_counter() - t0, 3), "from_cache": True}
            return cls(spec.name, meta["ids"], stats=stats, cache_key=cache_key, **arrays)
        built = cls.build(spec, n, normalize)
        if derived.writes:
            for a in ("ngrams", "first_item", "items", "starts"):
                save_npy(folder / f"{a}.npy", getattr(built, a))
            # Last: the set is whole. Without its build time, so reruns write the same bytes.
            stats = {k: v for k, v in built.stats.items() if k != "build_seconds"}
            write_json(done, {"ids": built.ids, "stats": stats})
            built.cache_key = cache_key
        return built

    @classmethod
    def load(cls, folder, name: str) -> "BenchmarkSet":
        return cls(
            name,
            read_json(folder / f"{name}.ids.json"),
            load_npy(folder / f"{name}.ngrams.npy", mmap=True),
            load_npy(folder / f"{name}.first_item.npy", mmap=True),
        )


# ---- the stage --------------------------------------------------------------------------------


class Decontaminate(GlobalStage):
    name = "decontaminate"
    summary = "documents sharing a word n-gram with a benchmark item removed (or the passage cut)"
    Config = DecontaminateConfig
    engines = ("xxhash",)
    # Benchmarks are read as the corpus was normalized: with the chain's normalize options.
    needs = ("normalize",)

    @property
    def rewrites_text(self) -> bool:
        return self.config.mode == "cut"

    def dependencies(self) -> Dependencies:
        return Dependencies(files=tuple(Path(b.path) for b in self.config.benchmarks))

    def normalize_config(self) -> NormalizeOptions:
        upstream = self.ctx.upstream.get("normalize") if self.ctx is not None else None
        return upstream if upstream is not None else NormalizeOptions()

    def use_sets(self, sets: list["BenchmarkSet"]) -> None:
        """The benchmark sets `decontaminate_batch` looks documents up in (one per benchmark of
        the config, in its order)."""
        self._sets = sets
        self._item_ids = {b.name: pa.array(b.ids, pa.string()) for b in sets}

    # -- the shard task --
    @shard_task
    def decontaminate_shard(self, task) -> dict:
        work = task.folder / "work"
        key = str(work)
        if getattr(self, "_sets_from", None) != key:
            self.use_sets([BenchmarkSet.load(work, b.name) for b in self.config.benchmarks])
            self._sets_from = key
        tally: Counter = Counter()
        found: dict = defaultdict(lambda: defaultdict(list))

        def transform(table: pa.Table, row0: int) -> pa.Table:
            return self.decontaminate_batch(table, tally, found)

        marker = rewrite_shard(self, task, transform)
        hits = {
            b: {s: np.unique(np.concatenate(parts)).tolist() for s, parts in by_source.items()}
            for b, by_source in found.items()
        }
        return {**marker, "tally": dict(tally), "found": hits}

    def decontaminate_batch(self, table: pa.Table, tally: Counter, found) -> pa.Table:
        """One batch: its n-grams looked up in every benchmark; contaminated documents marked
        (remove) or their overlapping passages cut (cut). `tally` counts per source,
        `found[benchmark][source]` collects the n-grams found (indices into the set)."""
        n, D = self.config.ngram, table.num_rows
        sources = (
            np.asarray(pc.fill_null(table[SOURCE], ONE_SOURCE).to_numpy(zero_copy_only=False), object)
            if SOURCE in table.column_names
            else np.full(D, ONE_SOURCE, object)
        )
        words = Words.of(table["text"])
        hashes, first_word, doc = words.ngrams(n)
        hit_any = np.zeros(len(hashes), bool)
        label = np.full(D, None, object)  # the first benchmark:item each document shares
        by_id = np.zeros(D, bool)          # documents that are an item, by their id column
        for source, count in zip(*np.unique(sources, return_counts=True)):
            tally[f"{source}\tdocs_in"] += int(count)
        for spec in self.config.benchmarks:
            if spec.match_column is None or spec.match_column not in table.column_names:
                continue
            values = pc.cast(table[spec.match_column], pa.string())
            named = np.asarray(pc.fill_null(pc.is_in(values, value_set=self._item_ids[spec.name]), False))
            if not named.any():
                continue
            for d, value in zip(np.flatnonzero(named).tolist(), values.filter(pa.array(named)).to_pylist()):
                if label[d] is None:
                    label[d] = f"{spec.name}:{value}"
            by_id |= named
            for source, count in zip(*np.unique(sources[named], return_counts=True)):
                tally[f"{source}\t{spec.name}\tdocuments_by_id"] += int(count)
        for bench in self._sets:
            hit, at = bench.lookup(hashes)
            if not hit.any():
                continue
            hit_any |= hit
            docs, first = np.unique(doc[hit], return_index=True)
            for d, i in zip(docs.tolist(), at[hit][first].tolist()):
                if label[d] is None:
                    label[d] = f"{bench.name}:{bench.ids[int(bench.first_item[i])]}"
            for source, count in zip(*np.unique(sources[docs], return_counts=True)):
                tally[f"{source}\t{bench.name}\tdocuments"] += int(count)
            for source in np.unique(sources[doc[hit]]):
                found[bench.name][source].append(at[hit][sources[doc[hit]] == source])
        contaminated = label != None  # noqa: E711 (elementwise)
        if not contaminated.any():
            return table
        if self.config.mode == "cut":
            table, too_little = self._cut(table, words, first_word[hit_any], sources, tally)
            contaminated &= too_little | by_id          # an item itself goes whole
        for source, count in zip(*np.unique(sources[contaminated], return_counts=True)):
            tally[f"{source}\tremoved"] += int(count)
        reason = pa.array(np.where(contaminated, CONTAMINATED, None), pa.string())
        table = with_reason(table, reason)
        return table.append_column(DUPLICATE_OF, pa.array(np.where(contaminated, label, None), pa.string()))

    def _cut(self, table, words: Words, hit_first: np.ndarray, sources, tally) -> tuple[pa.Table, np.ndarray]:
        """The batch with the words of every n-gram found cut out (from the first byte of a
        run of such words to the last), whitespace tidied as normalize does; and which
        documents are left with fewer than n words (removed)."""
        n, W, D = self.config.ngram, len(words.start), table.num_rows
        cover = np.cumsum(np.bincount(hit_first, minlength=W + n) - np.bincount(hit_first + n, minlength=W + n))[:W] > 0
        word_doc = np.repeat(np.arange(D), words.counts)
        boundary = np.concatenate([[True], word_doc[1:] != word_doc[:-1]])
        prev_cover = np.concatenate([[False], cover[:-1]])
        next_cover = np.concatenate([cover[1:], [False]])
        next_boundary = np.concatenate([boundary[1:], [True]])
        run_first = np.flatnonzero(cover & (~prev_cover | boundary))
        run_last = np.flatnonzero(cover & (~next_cover | next_boundary))
        size = len(words.data)
        # A cut reaches out to the whitespace around the run, so punctuation attached to its
        # first and last words ("(", ".") goes with them.
        space = np.flatnonzero(np.isin(words.data, _WHITESPACE))
        lo, hi = words.start[run_first], words.end[run_last]
        run_doc = word_doc[run_first]
        before = np.searchsorted(space, lo) - 1
        lo = np.maximum(np.where(before >= 0, space[np.maximum(before, 0)] + 1, 0), words.offsets[run_doc])
        after = np.searchsorted(space, hi)
        hi = np.minimum(
            np.where(after < len(space), space[np.minimum(after, len(space) - 1)], size), words.offsets[run_doc + 1]
        )
        cut = np.cumsum(np.bincount(lo, minlength=size + 1) - np.bincount(hi, minlength=size + 1))[:size] > 0
        keep = ~cut
        kept_before = np.concatenate([[0], np.cumsum(keep)])
        offsets = kept_before[words.offsets]
        large = offsets[-1] >= 2**31
        text = pa.Array.from_buffers(
            pa.large_string() if large else pa.string(),
            D,
            [
                None,
                pa.py_buffer(offsets.astype(np.int64 if large else np.int32)),
                pa.py_buffer(np.ascontiguousarray(words.data[keep])),
            ],
        )
        words_cut = np.bincount(word_doc[cover], minlength=D)
        was_cut = words_cut > 0
        too_little = was_cut & (words.counts - words_cut < n)
        # Documents removed keep their text as it was (removed/ with keep_removed_text).
        rewritten = pa.array(was_cut & ~too_little)
        tidied = tidy_whitespace(text.filter(rewritten), self.normalize_config().max_blank_lines)
        original = table["text"].combine_chunks()
        text = pc.replace_with_mask(
            pc.cast(original, text.type),
            rewritten,
            tidied.combine_chunks() if isinstance(tidied, pa.ChunkedArray) else tidied,
        )
        table = table.set_column(table.column_names.index("text"), "text", pc.cast(text, original.type))
        for source in np.unique(sources[was_cut]):
            mine = was_cut & (sources == source)
            tally[f"{source}\tcut_documents"] += int(mine.sum())
            tally[f"{source}\twords_cut"] += int(words_cut[mine].sum())
        return table, too_little

    # -- the driver --
    def run(self, inputs, output) -> dict:
        work = output.folder / "work"
        work.mkdir(exist_ok=True)
        sets = [
            BenchmarkSet.cached(b, self.config.ngram, self.normalize_config(), self.ctx.cache or {})
            for b in self.config.benchmarks
        ]
        for bench in sets:
            bench.save(work)
        results = inputs.map(self.decontaminate_shard)
        tally: Counter = Counter()
        found: dict = defaultdict(lambda: defaultdict(list))
        for r in results:
            tally.update(r["tally"])
            for b, by_source in r["found"].items():
                for s, at in by_source.items():
                    found[b][s].append(np.asarray(at, np.int64))
        work.rmtree()
        sources = sorted({k.split("\t")[0] for k in tally})
        spec_of = {b.name: b for b in self.config.benchmarks}
        benchmarks = {}
        for bench in sets:
            hits = {s: np.unique(np.concatenate(parts)) for s, parts in found[bench.name].items()}
            every = np.unique(np.concatenate(list(hits.values()))) if hits else np.zeros(0, np.int64)
            benchmarks[bench.name] = {
                **bench.stats,
                "ngrams_found": int(len(every)),
                "items_found": int(len(bench.items_holding(every))),
                "documents": sum(tally[f"{s}\t{bench.name}\tdocuments"] for s in sources),
                "by_source": {
                    s: {
                        "items_found": int(len(bench.items_holding(hits[s]))) if s in hits else 0,
                        "documents": tally[f"{s}\t{bench.name}\tdocuments"],
                    }
                    for s in sources
                },
            }
            if spec_of[bench.name].match_column is not None:
                benchmarks[bench.name]["match_column"] = spec_of[bench.name].match_column
                benchmarks[bench.name]["documents_by_id"] = sum(
                    tally[f"{s}\t{bench.name}\tdocuments_by_id"] for s in sources)
                for s in sources:
                    benchmarks[bench.name]["by_source"][s]["documents_by_id"] = tally[
                        f"{s}\t{bench.name}\tdocuments_by_id"]
        by_source = {
            s: {k: tally[f"{s}\t{k}"] for k in ("docs_in", "removed", "cut_documents", "words_cut")} for s in sources
        }
        out = {
            "ngram": self.config.ngram,
            "mode": self.config.mode,
            "benchmarks": benchmarks,
            "by_source": by_source,
            "bytes_per_ngram": BYTES_PER_NGRAM,
        }
        if any(b.cache_key for b in sets):
            out["cache_keys"] = [b.cache_key for b in sets if b.cache_key]
        return out

    # -- what the run says about it --
    def manifest_fields(self, stats: dict) -> dict:
        if "benchmarks" not in stats:
            return {}
        return {
            "decontamination": {
                "ngram": stats["ngram"],
                "mode": stats["mode"],
                "benchmarks": {name: {k: b[k] for k in MANIFEST_KEYS + ("documents_by_id",) if k in b}
                               for name, b in stats["benchmarks"].items()},
                "by_source": stats["by_source"],
            }
        }

    def report_section(self, stats: dict, run):
        from pipeline.sections import Section, table

        if "benchmarks" not in stats:
            return None
        rows = []
        for name, b in stats["benchmarks"].items():
            for source, s in b["by_source"].items():
                by_id = f"{s['documents_by_id']:,} ({b['match_column']})" if "match_column" in b else "-"
                rows.append([name, source, b["items"], b["items_too_short"], s["items_found"], s["documents"], by_id])
        verb = "removed" if stats["mode"] == "remove" else "cut out of"
        body = (
            f"<p>A document sharing a {stats['ngram']}-word n-gram with a benchmark item is {verb} the corpus "
            f"(mode: {stats['mode']}). Items with no passage of {stats['ngram']} words cannot be detected "
            "(too short). A benchmark matched by id also removes every document whose id column names one of "
            "its items, whatever its text.</p>"
        )
        body += table(["benchmark", "source", "items", "too short", "items found", "documents (n-grams)",
                       "documents (by id)"], rows)
        cut = {s: v for s, v in stats["by_source"].items() if v["cut_documents"]}
        if cut:
            body += table(
                ["source", "documents cut", "words cut", "removed (too little left)"],
                [[s, v["cut_documents"], v["words_cut"], v["removed"]] for s, v in cut.items()],
            )
        return Section(
            "Benchmark decontamination",
            body,
            figures={
                "decontamination": {
                    n: {"items_found": b["items_found"], "documents": b["documents"]}
                    for n, b in stats["benchmarks"].items()
                }
            },
        )
