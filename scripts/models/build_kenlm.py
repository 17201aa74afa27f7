"""Build the KenLM model of the perplexity stage, the way CCNet does.

Training text: the abstracts of the reference MEDLINE file data/raw/pubmed20n0014.xml.gz,
never the corpus being filtered (pubmed21n1298). Text goes through the pipeline's normalize
stage, then CCNet's normalization (pipeline/engines/ccnet_norm.py), one paragraph per line. The model
is estimated with KenLM's own `lmplz` (singletons of order >= 2 pruned, so it stays small)
and turned into a quantized trie binary with `build_binary`.

`lmplz` and `build_binary` are not on any package registry: with --build-kenlm this script
downloads the kenlm source archive through pip and compiles them (needs cmake, a C++
compiler and Debian's boost/zlib/bz2/lzma dev packages: `make kenlm-tools` installs them).

    python scripts/models/build_kenlm.py [--order 3] [--out data/models/pubmed_lm.binary] [--build-kenlm]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pipeline.engines.ccnet_norm import document_lines, normalize_lines  # noqa: E402

REFERENCE = ROOT / "data/raw/pubmed20n0014.xml.gz"
TOOLS = ROOT / "build/kenlm/bin"


def build_tools() -> Path:
    """Compile lmplz and build_binary from the kenlm source archive on the package registry."""
    if (TOOLS / "lmplz").exists() and (TOOLS / "build_binary").exists():
        return TOOLS
    work = ROOT / "build/kenlm-src"
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "kenlm==0.3.0", "--no-binary", ":all:",
                    "--no-deps", "-d", str(work), "-q"], check=True)
    with tarfile.open(next(work.glob("kenlm-0.3.0.tar.gz"))) as tar:
        tar.extractall(work, filter="data")
    build = work / "kenlm-0.3.0/build"
    build.mkdir(exist_ok=True)
    subprocess.run(["cmake", "..", "-DCMAKE_BUILD_TYPE=Release"], cwd=build, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["make", f"-j{os.cpu_count() or 2}", "lmplz", "build_binary"], cwd=build, check=True,
                   stdout=subprocess.DEVNULL)
    TOOLS.mkdir(parents=True, exist_ok=True)
    for tool in ("lmplz", "build_binary"):
        shutil.copy2(build / "bin" / tool, TOOLS / tool)
    return TOOLS


def reference_documents():
    """Normalized English abstracts of the reference file (one string per document)."""
    import pyarrow.compute as pc

    from pipeline.config import InputConfig
    from pipeline.readers import read_documents
    from pipeline.stages.normalize import Normalize, NormalizeConfig

    normalize = Normalize(NormalizeConfig(), ctx=None)
    for batch in read_documents(InputConfig(paths=[str(REFERENCE)]), 1000):
        table = normalize.process(batch.table)
        table = table.filter(pc.equal(table["language"], "eng"))
        yield from normalize_lines(table["text"]).to_pylist()


def bucket_cutoffs(model_path: Path) -> dict:
    """CCNet's head/middle/tail edges: the 30th and 60th percentiles on the reference text."""
    import kenlm
    import numpy as np

    from pipeline.stages.perplexity import document_perplexity

    model = kenlm.Model(str(model_path))
    ppl = np.array([document_perplexity(model, d) for d in reference_documents()])
    q = np.percentile(ppl, [30, 60, 50, 90, 99]).round(1).tolist()
    return {"bucket_cutoffs": q[:2], "reference_percentiles": dict(zip(["p30", "p60", "p50", "p90", "p99"], q)),
            "reference_documents": int(len(ppl))}


def training_text(out: Path) -> int:
    lines = 0
    with open(out, "w", encoding="utf-8") as fh:
        for text in reference_documents():
            for line in document_lines(text):
                fh.write(line + "\n")
                lines += 1
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "data/models/pubmed_lm.binary"))
    ap.add_argument("--build-kenlm", action="store_true", help="compile lmplz/build_binary if missing")
    ap.add_argument("--memory", default="2G", help="lmplz -S")
    args = ap.parse_args()
    if not REFERENCE.exists():
        print(f"error: {REFERENCE} missing; run 'make data' first", file=sys.stderr)
        return 1
    tools = build_tools() if args.build_kenlm else TOOLS
    if not (tools / "lmplz").exists():
        print(f"error: {tools}/lmplz not found; rerun with --build-kenlm (make models does)", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "train.txt"
        n = training_text(text)
        arpa = Path(tmp) / "lm.arpa"
        prune = ["--prune", "0"] + ["1"] * (args.order - 1)
        with open(text, "rb") as src, open(arpa, "wb") as dst:
            subprocess.run([str(tools / "lmplz"), "-o", str(args.order), "-S", args.memory, "-T", tmp,
                            "--discount_fallback", *prune], stdin=src, stdout=dst, check=True,
                           stderr=subprocess.DEVNULL)
        tmp_out = out.with_suffix(".tmp")
        subprocess.run([str(tools / "build_binary"), "-q", "8", "-b", "8", "-s", "trie", str(arpa), str(tmp_out)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.replace(tmp_out, out)
    meta = {"order": args.order, "training_lines": n, "training_file": REFERENCE.name, **bucket_cutoffs(out)}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB, order {args.order}, {n} training lines, sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
