"""split: document-level train/validation split after dedup, from a hash of (seed, id) alone,
so a document lands in the same split whatever else is in the corpus. With `by` (a column naming
a patient, pseudonymized by phi), each group lands whole in one split: the groups are taken in
the order of a keyed hash of their value until validation holds as close to validation_fraction
of the documents as whole groups allow."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.documents import set_column
from pipeline.engines.band_partitions import partition_spans, partitions_for, read_partitions, write_band_partitions
from pipeline.engines.minhash import band_keys
from pipeline.engines.splits import SPLITS, assign_splits, group_keys, validation_groups
from pipeline.errors import UserError
from pipeline.runpath import load_npy, save_npy
from pipeline.stages.base import GlobalStage, StageConfig
from pipeline.tasks import shard_task

VALIDATION_GROUPS = "validation-groups.npy"


class SplitConfig(StageConfig):
    validation_fraction: float = Field(default=0.01, ge=0.0, lt=1.0)
    # After the split, count validation documents that share an LSH bucket with a train
    # document (the MinHash settings of dedup_minhash); 0 means no near-duplicate leak.
    check_near_duplicates: bool = True
    # A column naming each document's group (a patient: phi.group_field): every group lands whole
    # in one split. A document without a value is a group of its own.
    by: str | None = None


class Split(GlobalStage):
    name = "split"
    summary = "document-level train/validation split, stable per id and seed"
    Config = SplitConfig
    engines = ("xxhash", "datasketch")
    needs = ("dedup_minhash",)        # the leak check uses its LSH settings

    def group_field(self) -> str | None:
        return self.config.by

    def output_fields(self):
        return [pa.field("split", pa.string())]

    def batch_stats(self, table: pa.Table) -> dict[str, int]:
        if "split" not in table.column_names:
            return {}
        return {f"split.{v['values']}": v["counts"] for v in pc.value_counts(table["split"]).to_pylist()}

    @shard_task
    def split_shard(self, task) -> dict:
        """Map: the split column of one shard, written as its output shard; with the leak
        check, the shard's LSH band keys (dedup_minhash's settings) by partition."""
        from pipeline.tasks import rewrite_shard
        leak = task.params.get("leak")
        keys, flags = [], []
        hasher = None
        by = self.config.by
        val_groups = load_npy(task.folder / "work" / VALIDATION_GROUPS) if by else None
        if leak:
            minhash = self.ctx.upstream["dedup_minhash"]         # its options, as the leak check uses them
            hasher, (bands, rows) = minhash.hasher(), minhash.bands()

        def assign(table: pa.Table, row0: int) -> pa.Table:
            if by:
                is_val = np.isin(self._group_keys(table), val_groups)
            else:
                is_val = assign_splits(table["id"].to_pylist(), self.ctx.seed, self.config.validation_fraction)
            if hasher is not None:
                keys.append(band_keys(hasher.signatures(table["text"].to_pylist()), bands, rows))
                flags.append(is_val)
            return set_column(table, "split", pa.array(np.where(is_val, "validation", "train"), pa.string()))
        marker = rewrite_shard(self, task, assign)
        if hasher is not None:
            work = task.folder / "work"
            all_keys = np.concatenate(keys) if keys else np.zeros((0, bands), np.uint64)
            write_band_partitions(work / f"bands-{task.shard.name}", all_keys, task.row0, task.params["partitions"])
            save_npy(work / f"val-{task.shard.name}.npy", np.concatenate(flags) if flags else np.zeros(0, bool))
        return marker

    def _group_keys(self, table: pa.Table) -> np.ndarray:
        if self.config.by not in table.column_names:
            raise UserError(f"split.by: the input has no column {self.config.by!r} (from the input's fields: "
                            "input.columns; through phi: phi.group_field)")
        return group_keys(pc.cast(table[self.config.by], pa.string()).to_pylist(), table["id"].to_pylist(),
                          self.ctx.seed)

    @shard_task
    def group_sizes_shard(self, task) -> dict:
        """Map: one shard's groups (keyed hashes) and their documents, to work/groups-NAME.npy."""
        from pipeline.shards import read_shard
        keys = [self._group_keys(t) for t in read_shard(task.shard.path, None, ["id", self.config.by])]
        unique, sizes = np.unique(np.concatenate(keys) if keys else np.zeros(0, np.uint64), return_counts=True)
        save_npy(task.folder / "work" / f"groups-{task.shard.name}.npy", np.stack([unique, sizes.astype(np.uint64)]))
        return {"documents": int(sizes.sum())}

    @shard_task
    def leak_partitions(self, task) -> dict:
        """Reduce, per bucket partition of the task's span: validation rows that share a bucket
        with a train row."""
        work = task.folder / "work"
        names = task.params["names"]
        is_val = None
        rows: set[int] = set()
        for _, pairs in read_partitions(work, names, *task.params["partitions"]):
            if not len(pairs):
                continue
            if is_val is None:
                is_val = np.concatenate([load_npy(work / f"val-{name}.npy") for name in names])
            order = np.argsort(pairs["key"], kind="stable")
            fk, fr = pairs["key"][order], pairs["row"][order].astype(np.int64)
            new_run = np.concatenate([[True], fk[1:] != fk[:-1]])
            run_id = np.cumsum(new_run) - 1
            has_train = np.zeros(int(new_run.sum()), bool)
            np.logical_or.at(has_train, run_id, ~is_val[fr])
            rows.update(np.unique(fr[is_val[fr] & has_train[run_id]]).tolist())
        return {"rows": sorted(rows)}

    def run(self, inputs, output) -> dict:
        leak = self._leak_settings()
        partitions = None
        grouped = None
        if self.config.by:
            (output.folder / "work").mkdir(exist_ok=True)
            grouped = self._choose_validation_groups(inputs, output.folder / "work")
        if leak is not None:
            (output.folder / "work").mkdir(exist_ok=True)
            # As the MinHash stage cuts its band keys: fewer partitions for a small input.
            minhash = self.ctx.upstream["dedup_minhash"]
            partitions = partitions_for(sum(s.rows for s in inputs.shards), minhash.bands()[0], minhash.partitions)
        markers = inputs.map(self.split_shard, leak=leak, partitions=partitions)
        counts = {s: sum(m["stats"].get(f"split.{s}", 0) for m in markers) for s in SPLITS}
        stats = {"splits": counts, "validation_fraction": self.config.validation_fraction}
        if grouped is not None:
            total = sum(counts.values())
            stats["by"] = {"column": self.config.by, **grouped,
                           "validation_share": round(counts["validation"] / total, 5) if total else 0.0}
        if leak is not None:
            names = inputs.names()
            found = inputs.map_tasks(self.leak_partitions, [{"partitions": span, "names": names}
                                                               for span in partition_spans(partitions)])
            stats["validation_near_train"] = len({r for f in found for r in f["rows"]})
        if (output.folder / "work").exists():
            (output.folder / "work").rmtree()
        return stats

    def _choose_validation_groups(self, inputs, work) -> dict:
        """The groups that go to validation (work/VALIDATION_GROUPS, for the split tasks), from
        every shard's group sizes; how many groups went each way."""
        inputs.map(self.group_sizes_shard)
        parts = [load_npy(work / f"groups-{name}.npy") for name in inputs.names()]
        keys = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.uint64)
        sizes = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.uint64)
        unique, inverse = np.unique(keys, return_inverse=True)
        totals = np.bincount(inverse, weights=sizes.astype(np.float64), minlength=len(unique)).astype(np.int64)
        chosen = validation_groups(unique, totals, self.config.validation_fraction)
        save_npy(work / VALIDATION_GROUPS, chosen)
        return {"groups": {"train": int(len(unique) - len(chosen)), "validation": int(len(chosen))}}

    def output_warnings(self, stats: dict) -> list[str]:
        counts = stats.get("splits") or {}
        if self.config.validation_fraction > 0 and not counts.get("validation") and counts.get("train"):
            return [f"the validation split is empty ({counts['train']:,} documents x validation_fraction "
                    f"{self.config.validation_fraction} gives none{' whole group' if self.config.by else ''}): "
                    "raise split.validation_fraction or add documents"]
        return []

    def manifest_fields(self, stats: dict) -> dict:
        out = {"validation_near_train": stats["validation_near_train"]} if "validation_near_train" in stats else {}
        if "by" in stats:
            out["split_by"] = stats["by"]
        return out

    def card_section(self, stats: dict, run):
        if "validation_near_train" not in stats:
            return None
        from pipeline.card import number
        return "Deduplication", (f"- Validation documents sharing an LSH bucket with a train document: "
                                 f"{number(stats['validation_near_train'])}.")

    def _leak_settings(self) -> dict | None:
        minhash = self.ctx.upstream.get("dedup_minhash")
        if not self.config.check_near_duplicates or minhash is None:
            return None
        return minhash.model_dump()
