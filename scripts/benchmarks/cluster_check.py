"""The chain on a two-node Ray cluster started as docs/scaling-out.md tells a user, against the
local run's bytes, and how often a run off a terminal says something about each stage.

    python scripts/benchmarks/cluster_check.py --docs 200000 --out bench/cluster.json

`ray start --head` and a second node with `ray start --address ...` (two raylets on this machine,
one CPU each: the nodes share the machine, not a network), then `configs/pubmed.yaml`'s chain over
the first --docs documents of bench-scale's planted corpus (scripts/benchmarks/bench_scale.py)
with `executor: {kind: ray, address: auto}` and `--log-format json`, stderr read as it comes.
Then the same chain with the local executor (2 workers), unless --local-digest gives its
`final/` digest from a run of the same code. Writes: the wall of both, the digest of both
`final/`, the cluster's node count from the manifest, and per stage the longest silence on
stderr (seconds between two lines while the stage runs: a log reader's longest wait for news).
The script stops only the cluster it started (SIGTERM to its own `ray start --block` processes)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from scripts.benchmarks.bench_scale import RATES, WORK, chain_config, checkout_state, corpus, final_digest  # noqa: E402


def start_cluster(temp_dir: str, port: int, env: dict, object_store_mb: int) -> list[subprocess.Popen]:
    """`ray start --head` and a second node on this machine, one CPU each, both up on return
    (both stopped again if either fails to start)."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    common = ["--num-cpus", "1", "--object-store-memory", str(object_store_mb * 2**20), "--disable-usage-stats",
              "--block"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True, "env": env}
    nodes = [subprocess.Popen([ray_bin, "start", "--head", "--port", str(port), "--temp-dir", temp_dir,
                               "--include-dashboard", "false", *common], **quiet)]
    try:
        deadline = time.monotonic() + 120       # the head's port first, then the second node
        while socket.socket().connect_ex(("127.0.0.1", port)) and time.monotonic() < deadline:
            time.sleep(0.5)
        nodes.append(subprocess.Popen([ray_bin, "start", "--address", f"127.0.0.1:{port}", *common], **quiet))
        wait = ("import ray, time\nray.init(address='auto')\n"
                "while ray.cluster_resources().get('CPU', 0) < 2: time.sleep(0.5)\n")
        subprocess.run([sys.executable, "-c", wait], env=env, check=True, timeout=180, capture_output=True)
    except BaseException:
        stop_cluster(nodes)
        raise
    return nodes


def stop_cluster(nodes: list[subprocess.Popen]) -> None:
    for node in reversed(nodes):
        node.send_signal(signal.SIGTERM)       # --block: the node stops its own processes
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)


def run(cfg: Path, env: dict) -> tuple[float, list[dict]]:
    """The chain in a child process; its JSON stderr lines, each with the moment it was read."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "--config", str(cfg), "--log-format", "json",
                             "--progress-every", "10"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            lines.append({"time": datetime.now().astimezone().isoformat(), "event": "text", "message": line[:200]})
    if proc.wait() != 0:
        tail = "\n".join(str(x.get("message", x)) for x in lines[-5:])
        raise SystemExit(f"the chain ({cfg}) failed:\n{tail}")
    return time.perf_counter() - t0, lines


def silences(lines: list[dict]) -> dict[str, float]:
    """Per stage, the longest time between two stderr lines from its start to its end."""
    out, stage, last = {}, None, None
    for line in lines:
        t = datetime.fromisoformat(line["time"]).timestamp()
        if line.get("event") == "stage_start":
            stage, last = line["stage"], t
            out[stage] = 0.0
            continue
        if stage is not None:
            out[stage] = round(max(out[stage], t - last), 1)
            last = t
        if line.get("event") == "stage_end":
            stage = None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200_000, help="documents of the planted corpus (first N)")
    ap.add_argument("--corpus-docs", type=int, default=1_000_000, help="bench-scale's corpus size")
    ap.add_argument("--local-digest", help="final/'s digest of the local run of this code (else it is run)")
    ap.add_argument("--object-store-mb", type=int, default=500, help="each node's object store")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/cluster.json")
    args = ap.parse_args()
    data, _ = corpus(args.corpus_docs, dict(RATES))
    code = checkout_state()
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    port_number = port.getsockname()[1]
    port.close()
    temp_dir = tempfile.mkdtemp(prefix="ray-")        # short: Ray's socket paths have a length limit
    # Token authentication off for this throwaway cluster: a user's ~/.ray token stays out of it.
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port_number}", "RAY_AUTH_MODE": "disabled"}
    out = WORK / f"cluster-{args.docs}"
    shutil.rmtree(out, ignore_errors=True)
    cfg_path = chain_config(data, args.docs, 2, out)
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    cfg.update(executor={"kind": "ray", "address": "auto"}, progress=True)
    cfg_path = cfg_path.with_name(f"cluster-{args.docs}.yaml")
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    nodes = start_cluster(temp_dir, port_number, env, args.object_store_mb)
    try:
        wall, lines = run(cfg_path, env)
    finally:
        stop_cluster(nodes)
        shutil.rmtree(temp_dir, ignore_errors=True)
    manifest = json.loads((out / "manifest.json").read_text())
    result = {"command": "python scripts/benchmarks/cluster_check.py " + " ".join(sys.argv[1:]), "code": code,
              "docs": args.docs, "nodes": manifest["executor"].get("cluster_nodes"),
              "executor": manifest["executor"], "wall_s": round(wall, 1), "final_digest": final_digest(out),
              "longest_silence_s": silences(lines), "progress_every_s": 10}
    result["longest_silence_s_any_stage"] = max(result["longest_silence_s"].values(), default=None)
    if args.local_digest:
        result["local_final_digest"], result["local_from"] = args.local_digest, "--local-digest"
    else:
        local = WORK / f"cluster-{args.docs}-local"
        shutil.rmtree(local, ignore_errors=True)
        local_cfg = {**cfg, "executor": {"kind": "local"}, "output_dir": str(local), "progress": False}
        local_path = cfg_path.with_name(f"cluster-{args.docs}-local.yaml")
        local_path.write_text(yaml.safe_dump(local_cfg, sort_keys=False), encoding="utf-8")
        local_wall, _ = run(local_path, {k: v for k, v in env.items() if k != "RAY_ADDRESS"})
        result.update(local_final_digest=final_digest(local), local_wall_s=round(local_wall, 1),
                      local_from="a local run of this code (2 workers)")
    result["same_final_bytes"] = result["final_digest"] == result["local_final_digest"]
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "executor"}))
    return 0 if result["same_final_bytes"] else 1


if __name__ == "__main__":
    sys.exit(main())
