"""How long CI takes: a clean clone of HEAD in a temporary folder, `.ci/run` in it (the virtualenv,
the packages, the trainer library, the MEDLINE fetch, then `make test`), timed as a whole and in
its two parts (everything before pytest's first line, and pytest's own total), with the test
count and the machine's CPU. CI's budget is 600 s.

    python scripts/benchmarks/ci_time.py --out bench/ci_time.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        t0 = time.monotonic()
        proc = subprocess.Popen([str(clone / ".ci/run")], cwd=clone, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        pytest_start, lines = None, []
        for line in proc.stdout:
            lines.append(line)
            if pytest_start is None and "-m pytest" in line:
                pytest_start = time.monotonic()
        proc.wait()
        wall = time.monotonic() - t0
    summary = next((ln for ln in reversed(lines) if re.search(r"\d+ passed", ln)), "")
    if proc.returncode != 0:
        sys.exit(f".ci/run failed ({proc.returncode}):\n{''.join(lines[-30:])}")
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    pytest_seconds = float(re.search(r"in ([\d.]+)s", summary).group(1))
    result = {
        "command": "python scripts/benchmarks/ci_time.py " + " ".join(sys.argv[1:]),
        "commit": commit,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "wall_seconds": round(wall, 1),
        "before_tests_seconds": round(pytest_start - t0, 1) if pytest_start else None,
        "pytest_seconds": pytest_seconds,
        "tests_passed": passed,
        "budget_seconds": 600,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
