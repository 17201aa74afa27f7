"""Reads the pack stage's Megatron-LM files with megatron-core's own IndexedDataset and checks
them against the datasets output of the same run.

megatron-core needs torch, so it runs in a throwaway virtualenv of its own, not in .venv:

    python3 -m venv /tmp/venv-megatron
    /tmp/venv-megatron/bin/pip install torch==2.13.0 megatron-core numpy pyarrow
    /tmp/venv-megatron/bin/python scripts/evaluation/verify_megatron.py runs/pubmed
    /tmp/venv-megatron/bin/python scripts/evaluation/verify_megatron.py runs/medbot --out bench/megatron_blend.json

For each split: the token ids of every Megatron sequence, concatenated, must start with the
rows of final/<split> (datasets' Arrow files, read with pyarrow), and there must be one
sequence per document, each ending in the EOS id.

A run with a mix (several sources) also has one indexed dataset per source and split
(final/megatron/SOURCE/<split>_text_document) and the --data-path value that blends them
(final/megatron/data_path.txt): each per-source file is read with IndexedDataset too, its
documents and tokens must be the manifest's, every one of its documents must be a document of
the mixture's file, none twice (the source's documents once), the validation files together
must be the mixture's validation documents, and the --data-path prefixes must be those files,
with the mix's weights. Then megatron-core's BlendedMegatronDatasetBuilder builds the train
blend of that --data-path line for --train-samples (the mixture's train sequences), as
pretrain_gpt.py would: each source's share of its samples must be within 1 % of its weight, and
the epochs of each source it draws are stated beside the run's own."""
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


def main(run_dir: str, out_file: str | None = None) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    run = Path(run_dir)
    stats = json.loads(next((run / "stages").glob("*_pack/stats.json")).read_text())
    eos = (
        json.loads((run / "final/flat/meta.json").read_text())["eos_id"]
        if (run / "final/flat/meta.json").exists()
        else None
    )
    out = {}
    for split, s in stats["splits"].items():
        ds = IndexedDataset(str(run / "final/megatron" / f"{split}_text_document"), multimodal=False, mmap=True)
        seqs = [np.asarray(ds[i], np.int64) for i in range(len(ds))]
        tokens = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
        packed = datasets_tokens(run / "final" / split)
        ok = (
            len(ds) == s["documents"]
            and len(tokens) == s["tokens"]
            and np.array_equal(tokens[: len(packed)], packed)
            and (eos is None or all(q[-1] == eos for q in seqs))
        )
        out[split] = {
            "sequences": len(ds),
            "documents": len(ds.document_indices) - 1,
            "tokens": int(len(tokens)),
            "datasets_tokens": int(len(packed)),
            "dtype": np.dtype(ds.index.dtype).name,
            "match": bool(ok),
        }
    manifest = json.loads((run / "manifest.json").read_text())
    if manifest.get("megatron"):
        out["sources"] = check_sources(run, manifest, IndexedDataset)
        out["blend"] = check_blend(run, manifest)
    print(json.dumps(out, indent=2))
    if out_file:  # a result file (bench/megatron_blend.json for the MedBot run)
        Path(out_file).write_text(json.dumps({"run": run_dir, **out}, indent=2, sort_keys=True) + "\n")
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
            good = (
                len(own) == files[split]["documents"]
                and tokens == files[split]["tokens"]
                and len(set(own)) == len(own)
                and all(d in in_mixture for d in own)
            )
            found["files"][f"{source}/{split}"] = {"documents": len(own), "tokens": tokens, "match": good}
            ok &= good
        if split == "validation":
            ok &= sorted(own_all) == sorted(mixture)
    words = (run / "final/megatron/data_path.txt").read_text().split()
    weights = {p: float(w) for w, p in zip(words[::2], words[1::2])}
    expected = {f["train"]["prefix"]: mix[s]["weight"] for s, f in megatron["files"].items()}
    found["data_path"] = " ".join(words)
    found["data_path_match"] = weights.keys() == expected.keys() and all(
        abs(weights[p] - expected[p]) < 1e-6 for p in expected
    )
    found["match"] = bool(ok and found["data_path_match"])
    return found


def check_blend(run: Path, manifest: dict) -> dict:
    """Megatron's own blending of the per-source files by the --data-path line: the share of
    each source among the samples of the blend, and the epochs of it that they hold."""
    import types

    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    megatron, mix = manifest["megatron"], manifest["mix"]["sources"]
    words = megatron["data_path"].split()
    weights, prefixes = [float(w) for w in words[::2]], words[1::2]
    sources = [next(s for s, f in megatron["files"].items() if f["train"]["prefix"] == p) for p in prefixes]
    # Building the sample indexes needs no tokenizer beyond these fields (no text is tokenized).
    tokenizer = types.SimpleNamespace(eod=0, pad=-1, vocab_size=1 << 17, unique_identifiers={"class": "verify"})
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=manifest["seq_len"],
        tokenizer=tokenizer,
        blend_per_split=[([str(run / p) for p in prefixes], weights), None, None],
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [megatron["train_samples"], None, None], lambda: True, config
    ).build()
    counts = np.bincount(np.asarray(train.dataset_index), minlength=len(prefixes))
    out = {"samples": int(counts.sum()), "sources": {}}
    for i, s in enumerate(sources):
        share = float(counts[i] / counts.sum())
        out["sources"][s] = {
            "weight": weights[i],
            "sample_share": round(share, 6),
            "epochs_drawn": round(float(counts[i]) * manifest["seq_len"] / megatron["files"][s]["train"]["tokens"], 4),
            "epochs_of_the_run": mix[s]["epochs"],
        }
    out["match"] = all(abs(v["sample_share"] - v["weight"]) <= 0.01 * v["weight"] for v in out["sources"].values())
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    out_file = args[args.index("--out") + 1] if "--out" in args else None
    main(next(a for i, a in enumerate(args) if a != "--out" and (i == 0 or args[i - 1] != "--out")), out_file)
