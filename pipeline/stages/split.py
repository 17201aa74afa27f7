"""split: document-level train/validation split after dedup, from a hash of (seed, id) alone,
so a document lands in the same split whatever else is in the corpus."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import xxhash
from pydantic import Field

from pipeline.documents import set_column
from pipeline.stages.base import Stage, StageConfig

SPLITS = ("train", "validation")


class SplitConfig(StageConfig):
    validation_fraction: float = Field(default=0.01, ge=0.0, lt=1.0)
    # After the split, count validation documents that share an LSH bucket with a train
    # document (the MinHash settings of dedup_minhash); 0 means no near-duplicate leak.
    check_near_duplicates: bool = True


def assign_splits(ids: list[str], seed: int, validation_fraction: float) -> np.ndarray:
    """True where a document goes to validation."""
    h = np.fromiter((xxhash.xxh64_intdigest(i.encode("utf-8"), seed=seed) for i in ids), dtype=np.uint64, count=len(ids))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) < validation_fraction


class Split(Stage):
    name = "split"
    summary = "document-level train/validation split, stable per id and seed"
    Config = SplitConfig
    kind = "global"

    def output_fields(self):
        return [pa.field("split", pa.string())]

    def run(self, inputs, output) -> dict:
        counts = {s: 0 for s in SPLITS}
        checker = self._near_duplicate_checker()
        for table in inputs.tables(output):
            is_val = assign_splits(table["id"].to_pylist(), self.ctx.seed, self.config.validation_fraction)
            table = set_column(table, "split", pa.array(np.where(is_val, "validation", "train"), pa.string()))
            counts["validation"] += int(is_val.sum())
            counts["train"] += int((~is_val).sum())
            if checker is not None:
                checker.add(table["text"].to_pylist(), is_val)
            output.write(table)
        stats = {"splits": counts, "validation_fraction": self.config.validation_fraction}
        if checker is not None:
            leak = checker.count_validation_near_train()
            stats["validation_near_train"] = leak
        return stats

    def _near_duplicate_checker(self):
        config = self.ctx.config
        if not self.config.check_near_duplicates or config is None or not config.has_stage("dedup_minhash"):
            return None
        from pipeline.stages.dedup_minhash import SplitLeakChecker
        return SplitLeakChecker(config.stage("dedup_minhash").config, self.ctx)
