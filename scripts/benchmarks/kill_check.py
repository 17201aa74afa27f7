"""A clinical run cut short at random moments leaves no planted value readable on disk (issue 39,
item 4), and its rerun gives the bytes of an uninterrupted run.

Notes with planted identifiers (in the text, the ids and a meta field; values the PHI stage
removes: the uninterrupted run's check) go through normalize, heuristics, phi and the tail,
2 local workers, two notes per shard. Each trial starts the run in an empty folder, waits a
random time within the uninterrupted run's wall and sends SIGINT (to the process group, as
Ctrl-C does), SIGTERM or SIGKILL to the driver, or SIGKILL to a worker. While it runs, and after
it ends, every file of the run folder and of the run's temp folder ($TMPDIR) is read (Arrow
shards decompressed, as their rows) for the planted values. Then the same command finishes the
run, and its final/ is compared with the uninterrupted run's, byte for byte.

    python scripts/benchmarks/kill_check.py --kills 20 --out bench/kill_check.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY = "7d1e5b3a9c0f2468ace13579bdf02468ace13579bdf02468ace13579bdf0246a"

FIRST = ["Eleanor", "Chinedu", "Maren", "Tobias", "Odile", "Amos", "Ines", "Harold"]
LAST = ["Vasquez-Hale", "Okafor", "Lindqvist", "Brennan", "Fairweather", "Thistlewood", "Castellanos", "Quimby"]
BODY = ("The patient rested comfortably overnight and the nursing team reviewed the medication list with "
        "pharmacy. Ambulation improved with physical therapy and the incision remained clean and dry. ")


def notes(n: int) -> tuple[list[dict], list[str]]:
    """n notes and every value planted in them (names, MRNs, phones, dates, ids, a meta field)."""
    rows, planted = [], []
    for i in range(n):
        first, last = FIRST[i % len(FIRST)], LAST[(i * 3) % len(LAST)]
        mrn, phone = f"{4417325 + 7919 * i}", f"617-555-{(143 + 37 * i) % 10000:04d}"
        date = f"{(i % 12) + 1:02d}/{(i % 27) + 1:02d}/2019"
        text = (f"Mr. {first} {last} was admitted for chest pain. MRN: {mrn}. Seen on {date}; the family can be "
                f"reached at {phone}. " + BODY * (1 + i % 3))
        rows.append({"id": f"{last}_{first}_MRN{mrn}", "ward_contact": f"{first} {last}", "text": text})
        planted += [f"{first} {last}", mrn, phone, date]
    # Removed before phi (too few words): its text never reaches phi.
    rows.append({"id": "Ortega_Luis_MRN0045454", "ward_contact": "Luis Ortega", "text": "Seen by Dr. Ortega."})
    planted += ["Ortega", "0045454"]
    return rows, sorted(set(planted))


CONFIG = """input: {{paths: [{src}]}}
output_dir: {out}
seed: 3
num_proc: 2
batch_size: 2
shard_size: 2
progress: false
stages:
  - normalize: {{}}
  - heuristics: {{min_words: 5, min_alpha_words_ratio: 0.3, c4_curly_braces: false}}
  - phi: {{profile: clinical}}
  - dedup_exact: {{}}
  - dedup_minhash: {{}}
  - split: {{validation_fraction: 0.2}}
  - tokenizer: {{vocab_size: 300}}
  - pack: {{seq_len: 32, batch_size: 2}}
"""


def file_text(path: Path) -> str:
    """A file's rows (an Arrow IPC stream or file: zstd-decompressed) or its bytes as text."""
    import pyarrow as pa
    try:
        data = path.read_bytes()
    except OSError:
        return ""                                   # gone meanwhile
    if data[:6] == b"ARROW1" or data[:4] == b"\xff\xff\xff\xff":
        for opener in (pa.ipc.open_stream, pa.ipc.open_file):
            try:
                rows = opener(pa.BufferReader(data)).read_all().to_pylist()
                return "\n".join(str(v) for row in rows for v in row.values())
            except (pa.ArrowInvalid, OSError):
                continue
    return data.decode("utf-8", errors="replace")


def scan(folders: list[Path], planted: list[str]) -> list[tuple[str, str]]:
    """(file, value) of every planted value readable in the folders now."""
    found = []
    for folder in folders:
        for parent, _, names in os.walk(folder):      # a folder gone meanwhile is skipped
            for name in names:
                path = Path(parent) / name
                text = file_text(path)
                found += [(str(path), v) for v in planted if v in text]
    return found


class Watcher:
    """Scans the folders again and again while a run goes on."""

    def __init__(self, folders, planted):
        self.folders, self.planted, self.found, self.scans = folders, planted, [], 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stop.is_set():
            self.found += scan(self.folders, self.planted)
            self.scans += 1
            self.stop.wait(0.01)                # a core for the run: this process scans ~100 times a second at most

    def close(self) -> list:
        self.stop.set()
        self.thread.join()
        return self.found


def start(cfg: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", str(cfg)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def workers(pid: int) -> list[int]:
    """The driver's worker processes: its descendants but multiprocessing's resource tracker."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" in cmdline:
            parents.pop(int(stat.parent.name))
    out, frontier = [], {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier}
        out += sorted(frontier)
    return out


def a_worker(driver: subprocess.Popen, wait: float = 60.0) -> int | None:
    """A worker of the driver, once one is up (None if the run ends first)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and driver.poll() is None:
        found = workers(driver.pid)
        if found:
            return found[0]
        time.sleep(0.05)
    return None


def final_bytes(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted((run / "final").rglob("*"))
            if p.is_file() and p.name != "README.md"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--notes", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=ROOT / "bench/work/kill-check")
    parser.add_argument("--signals", default="SIGINT,SIGTERM,SIGKILL,SIGKILL-worker",
                        help="the ways to end a run, in turn (SIGKILL-worker: SIGKILL to a worker)")
    parser.add_argument("--control", action="store_true",
                        help="also scan a run with phi.keep_raw: true (the raw stages kept): the scan must find them")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    rows, planted = notes(args.notes)
    src = args.work / "notes.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    env = {**os.environ, "MEDPREP_PHI_KEY": KEY, "XDG_CONFIG_HOME": str(args.work / "xdg")}

    def config(name: str, keep_raw: bool = False) -> tuple[Path, dict, Path]:
        out, tmp = args.work / name, args.work / f"{name}-tmp"
        tmp.mkdir()
        cfg = args.work / f"{name}.yaml"
        text = CONFIG.format(src=src, out=out)
        cfg.write_text(text.replace("{profile: clinical}", "{profile: clinical, keep_raw: true}") if keep_raw
                       else text, encoding="utf-8")
        return cfg, {**env, "TMPDIR": str(tmp)}, out

    control = None
    if args.control:
        cfg, control_env, kept = config("keep-raw", keep_raw=True)
        if start(cfg, control_env).wait() != 0:
            sys.exit("the keep_raw run failed")
        control = len({v for _, v in scan([kept], planted)})

    cfg, fresh_env, fresh = config("fresh")
    watcher = Watcher([fresh, Path(fresh_env["TMPDIR"])], planted)
    t0 = time.perf_counter()
    proc = start(cfg, fresh_env)
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    leaks_fresh = watcher.close() + scan([fresh, Path(fresh_env["TMPDIR"])], planted)
    if proc.returncode != 0:
        sys.exit(f"the uninterrupted run failed:\n{err[-2000:]}")

    cfg, cut_env, cut = config("cut")
    folders = [cut, Path(cut_env["TMPDIR"])]
    expected = final_bytes(fresh)
    trials = []
    for i in range(args.kills):
        ways = args.signals.split(",")
        how = ways[i % len(ways)]
        at = rng.uniform(0.05, 0.95) * wall
        for folder in folders:                        # each trial cuts a run short from its start
            shutil.rmtree(folder, ignore_errors=True)
        folders[1].mkdir()
        watcher = Watcher(folders, planted)
        proc = start(cfg, cut_env)
        time.sleep(at)
        target = proc.pid
        if how == "SIGKILL-worker":
            target = a_worker(proc) or proc.pid     # the workers start once the models are needed
        try:
            if how == "SIGINT":
                os.killpg(proc.pid, signal.SIGINT)     # Ctrl-C: the terminal's whole process group
            else:
                os.kill(target, signal.SIGKILL if how.startswith("SIGKILL") else signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        if how.startswith("SIGKILL"):
            try:
                os.killpg(proc.pid, signal.SIGKILL)       # the killed driver's workers, as a cluster's agent would
            except ProcessLookupError:
                pass
            time.sleep(0.5)
        found = watcher.close() + scan(folders, planted)
        cut_short = proc.returncode != 0
        # The same command again finishes the run (resuming phi's finished shards): an uninterrupted run's bytes.
        rerun = start(cfg, cut_env)
        _, err = rerun.communicate()
        found += scan(folders, planted)
        same = rerun.returncode == 0 and final_bytes(cut) == expected
        trials.append({"signal": how, "at_seconds": round(at, 2),
                       "killed": "driver" if target == proc.pid else "worker", "returncode": proc.returncode,
                       "cut_short": cut_short, "scans_while_running": watcher.scans,
                       "planted_values_readable": len(found),
                       "files_with_planted_values": sorted({f for f, _ in found})[:5],
                       "rerun_final_identical": same,
                       **({} if rerun.returncode == 0 else {"rerun_error": err.strip().splitlines()[-1:]})})
        print(f"trial {i + 1}: {how} at {at:.1f}s: exit {proc.returncode}, {watcher.scans} scans, "
              f"{len(found)} planted values readable, rerun identical: {same}", flush=True)
    result = {"command": "python scripts/benchmarks/kill_check.py " + " ".join(sys.argv[1:]), "notes": len(rows),
              "planted_values": len(planted), "uninterrupted_wall_seconds": round(wall, 2),
              "uninterrupted_planted_values_readable": len(leaks_fresh),
              "kills": len(trials), "cut_short": sum(t["cut_short"] for t in trials),
              "trials_with_planted_values_readable": sum(1 for t in trials if t["planted_values_readable"]),
              "reruns_identical_to_uninterrupted": sum(t["rerun_final_identical"] for t in trials),
              **({} if control is None else {"keep_raw_control_planted_values_found": control}),
              "trials": trials}
    print(json.dumps({k: v for k, v in result.items() if k != "trials"}, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if result["reruns_identical_to_uninterrupted"] < len(trials) or leaks_fresh \
            or result["trials_with_planted_values_readable"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
