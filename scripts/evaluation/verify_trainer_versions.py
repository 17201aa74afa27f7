"""Loads a finished run's tokenizer/ and final/ with whatever transformers and datasets are
installed, as a trainer would, and prints what it found as JSON. The test suite does this with
transformers 5 from `.venv/trainer-lib` (the Makefile installs it there, apart from `.venv`):

    PYTHONPATH=.venv/trainer-lib .venv/bin/python scripts/evaluation/verify_trainer_versions.py runs/tiny

and for the other major versions, in a throwaway virtualenv of their own:

    python3 -m venv /tmp/venv-trainer4
    /tmp/venv-trainer4/bin/pip install "transformers>=4.57,<5" "datasets==3.6.0"
    /tmp/venv-trainer4/bin/python scripts/evaluation/verify_trainer_versions.py runs/tiny

Checks: AutoTokenizer.from_pretrained(run/tokenizer) gives eos and a pad other than eos, and
encodes a PHI placeholder (when the tokenizer has them) as one id; datasets.load_from_disk reads
final/train (or the error it gives); the Arrow files read with pyarrow alone (the fallback the
dataset card names for datasets releases without the `List` feature type)."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(run_dir: str) -> None:
    import datasets
    import pyarrow as pa
    import transformers
    from transformers import AutoTokenizer

    run = Path(run_dir)
    out: dict = {"transformers": transformers.__version__, "datasets": datasets.__version__}
    tok = AutoTokenizer.from_pretrained(str(run / "tokenizer"))
    placeholder = next(iter(json.loads((run / "tokenizer/special_tokens_map.json").read_text())
                            .get("additional_special_tokens") or []), None)
    out["tokenizer"] = {
        "class": type(tok).__name__,
        "eos": [tok.eos_token, tok.eos_token_id],
        "pad": [tok.pad_token, tok.pad_token_id],
        "model_max_length": tok.model_max_length,
        "placeholder_ids": tok(placeholder, add_special_tokens=False)["input_ids"] if placeholder else None,
    }
    try:
        ds = datasets.load_from_disk(str(run / "final/train"))
        out["load_from_disk"] = {"rows": len(ds), "row_len": len(ds[0]["input_ids"])}
    except Exception as exc:  # the point is to record how it fails
        out["load_from_disk"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    files = sorted((run / "final/train").glob("data-*.arrow"))
    with open(files[0], "rb") as src:
        table = pa.ipc.open_stream(src).read_all()
    out["pyarrow"] = {"rows": table.num_rows, "type": str(table.schema.field("input_ids").type)}
    # The usual collator on a packed row that holds an EOS: with a pad token of its own, no label is masked.
    from transformers import DataCollatorForLanguageModeling

    row = next((list(r) for r in table["input_ids"].to_pylist() if tok.eos_token_id in r), None)
    if row is not None:
        batch = DataCollatorForLanguageModeling(tok, mlm=False, return_tensors="np")([{"input_ids": row}])
        out["collator_masked_labels"] = int((batch["labels"][0] == -100).sum())
    text = "Seen on <|DATE|> by <|NAME|>."
    out["encoded"] = {"text": text, "ids": tok(text, add_special_tokens=False)["input_ids"]}
    ok = (
        tok.eos_token_id is not None
        and tok.pad_token_id not in (None, tok.eos_token_id)
        and (placeholder is None or len(out["tokenizer"]["placeholder_ids"]) == 1)
    )
    print(json.dumps(out, indent=2))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main(sys.argv[1])
