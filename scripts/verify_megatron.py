"""Reads the pack stage's Megatron-LM files with megatron-core's own IndexedDataset and checks
them against the datasets output of the same run.

megatron-core needs torch, so it runs in a throwaway virtualenv of its own, not in .venv:

    python3 -m venv /tmp/venv-megatron
    /tmp/venv-megatron/bin/pip install torch==2.13.0 megatron-core numpy pyarrow
    /tmp/venv-megatron/bin/python scripts/verify_megatron.py runs/pubmed

For each split: the token ids of every Megatron sequence, concatenated, must start with the
rows of final/<split> (datasets' Arrow files, read with pyarrow), and there must be one
sequence per document, each ending in the EOS id.

A run with a mix (several sources) also has one indexed dataset per source and split
(final/megatron/SOURCE/<split>_text_document) and the --data-path value that blends them
(final/megatron/data_path.txt): each per-source file is read with IndexedDataset too, its
documents and tokens must be the manifest's, every one of its documents must be a document of
the mixture's file, none twice (the source's documents once), the validation files together
must be the mixture's validation documents, and the --data-path prefixes must be those files,
with the mix's weights."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa


def datasets_tokens(folder: Path) -> np.ndarray:
    tables = []
    for f in sorted(folder.glob("data-*.arrow")):
        with pa.memory_map(str(f)) as src:
            tables.append(pa.ipc.open_stream(src).read_all())
    if not tables:
        return np.zeros(0, np.int64)
    col = pa.concat_tables(tables)["input_ids"].combine_chunks()
    return col.flatten().to_numpy().astype(np.int64)


def main(run_dir: str) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    run = Path(run_dir)
    stats = json.loads(next((run / "stages").glob("*_pack/stats.json")).read_text())
    eos = json.loads((run / "final/flat/meta.json").read_text())["eos_id"] if (run / "final/flat/meta.json").exists() else None
    out = {}
    for split, s in stats["splits"].items():
        ds = IndexedDataset(str(run / "final/megatron" / f"{split}_text_document"), multimodal=False, mmap=True)
        seqs = [np.asarray(ds[i], np.int64) for i in range(len(ds))]
        tokens = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
        packed = datasets_tokens(run / "final" / split)
        ok = (len(ds) == s["documents"] and len(tokens) == s["tokens"] and np.array_equal(tokens[:len(packed)], packed)
              and (eos is None or all(q[-1] == eos for q in seqs)))
        out[split] = {"sequences": len(ds), "documents": len(ds.document_indices) - 1, "tokens": int(len(tokens)),
                      "datasets_tokens": int(len(packed)), "dtype": np.dtype(ds.index.dtype).name, "match": bool(ok)}
    manifest = json.loads((run / "manifest.json").read_text())
    if manifest.get("megatron"):
        out["sources"] = check_sources(run, manifest, IndexedDataset)
    print(json.dumps(out, indent=2))
    sys.exit(0 if all(v["match"] for v in out.values()) else 1)


def check_sources(run: Path, manifest: dict, IndexedDataset) -> dict:
    """The per-source files of a mix and the --data-path line that blends them."""
    def docs(prefix: Path) -> list[bytes]:
        ds = IndexedDataset(str(prefix), multimodal=False, mmap=True)
        return [np.asarray(ds[i], np.int64).tobytes() for i in range(len(ds))]
    megatron, mix = manifest["megatron"], manifest["mix"]["sources"]
    found: dict = {"files": {}}
    ok = True
    for split in ("train", "validation"):
        mixture = docs(run / "final/megatron" / f"{split}_text_document")
        in_mixture = set(mixture)
        own_all: list[bytes] = []
        for source, files in sorted(megatron["files"].items()):
            own = docs(run / files[split]["prefix"])
            own_all += own
            tokens = sum(len(d) // 8 for d in own)
            good = (len(own) == files[split]["documents"] and tokens == files[split]["tokens"]
                    and len(set(own)) == len(own) and all(d in in_mixture for d in own))
            found["files"][f"{source}/{split}"] = {"documents": len(own), "tokens": tokens, "match": good}
            ok &= good
        if split == "validation":
            ok &= sorted(own_all) == sorted(mixture)
    words = (run / "final/megatron/data_path.txt").read_text().split()
    weights = {p: float(w) for w, p in zip(words[::2], words[1::2])}
    expected = {f["train"]["prefix"]: mix[s]["weight"] for s, f in megatron["files"].items()}
    found["data_path"] = " ".join(words)
    found["data_path_match"] = weights.keys() == expected.keys() and all(
        abs(weights[p] - expected[p]) < 1e-6 for p in expected)
    found["match"] = bool(ok and found["data_path_match"])
    return found


if __name__ == "__main__":
    main(sys.argv[1])
