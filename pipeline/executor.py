"""Executors: who runs a stage's shard tasks. The same contract for both (see shards.py):
a task is one input shard (pipeline/tasks.py), a worker holds one stage instance set up once
(models loaded once per worker), and a task writes its shard's files and marker itself, so
the driver only hands out tasks and commits.

An executor knows no stage: it wraps any object with `name`, `config`, `ctx`, `setup()`,
`methods_without_setup` and task methods (`method(task) -> dict`), built in each worker as
`type(stage)(stage.config, stage.ctx)`, and calls `getattr(stage, method)(task)`.

- local: this process (num_proc 1) or a pool of spawned processes (concurrent.futures).
- ray: Ray Data, `from_items` of shard descriptors into `map_batches` over an actor pool
  (one actor per worker, `setup()` in its constructor), as NeMo Curator drives Ray. Ray's
  own file readers and writers are not used: they merge blocks and name files at random.
"""
from __future__ import annotations

import json
import logging
import multiprocessing as mp
import sys
import threading
from contextlib import contextmanager

from pipeline import progress
from pipeline.errors import StageFailed, UserError
from pipeline.tasks import ShardTask

log = logging.getLogger("medprep")


def run_task(stage, method: str, task: ShardTask, key: tuple | None = None) -> dict:
    """`stage.<method>(task)`; the documents it reports count for the task `key` (progress.py)."""
    with progress.running_task(key):
        return getattr(stage, method)(task)


class MapProgress:
    """A map's phase in the running stage's progress (pipeline/progress.py): its tasks' sizes
    (documents of each input shard, or tasks), the worker count, and each task's key."""

    def __init__(self, stage, method: str, tasks: list[ShardTask], workers: int):
        self.tracker = progress.current()
        self.phase = None
        if self.tracker is not None:
            name = getattr(stage, "phase_names", {}).get(method, method.removesuffix("_shard").replace("_", " "))
            sizes = [t.shard.rows if t.shard is not None else None for t in tasks]
            self.phase = self.tracker.phase(name, sizes, workers)

    def key(self, index: int) -> tuple[int, int] | None:
        return (self.phase, index) if self.phase is not None else None

    def report(self, key, n: int) -> None:
        if self.tracker is not None:
            self.tracker.report(tuple(key), n)

    def done(self, index: int) -> None:
        if self.tracker is not None:
            self.tracker.task_done(self.key(index))


def needs_setup(stage, method: str) -> bool:
    """Whether workers load the stage's models before running `method` (a threshold-only
    rerun decides again from stored scores: it never loads the model)."""
    return method not in stage.methods_without_setup


def setup_failure(name: str, exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"stage '{name}': setup failed: {type(exc).__name__}: {first}"


# ---- local ---------------------------------------------------------------------------------

_worker_stage = None
_worker_setup_error: str | None = None


def _init_worker(stage_cls, config, ctx, setup: bool = True, reports=None):
    global _worker_stage, _worker_setup_error
    logging.basicConfig(level=logging.WARNING)
    if reports is not None:
        progress.set_sink(progress.QueueSink(reports))
    try:
        _worker_stage = stage_cls(config, ctx)
        if setup:
            _worker_stage.setup()
    except Exception as exc:
        # Raised with the first task instead: an initializer that raises only breaks the
        # pool (multiprocessing.Pool even respawns the worker forever), losing the cause.
        _worker_setup_error = setup_failure(stage_cls.name, exc)


def _task_in_worker(method: str, task: dict, key: tuple | None = None) -> dict:
    if _worker_setup_error is not None:
        raise StageFailed(_worker_setup_error)
    return run_task(_worker_stage, method, task, key)


class LocalExecutor:
    kind = "local"

    def __init__(self, num_proc: int = 1):
        self.num_proc = num_proc
        # The pool of the stage running now, kept across its map calls (a global stage maps up
        # to four times: spawning workers and loading models once saves seconds per call).
        self._pool: WorkerPool | None = None
        self._pool_for: tuple | None = None

    def describe(self) -> dict:
        return {"kind": "local", "num_proc": self.num_proc}

    def _pool_of(self, stage, workers: int, setup: bool) -> "WorkerPool":
        key = self._pool_for
        if self._pool is not None and key[0] is stage and key[1] == setup and self._pool.num_proc >= workers:
            return self._pool
        self.end_stage()
        self._pool = WorkerPool(stage, workers, setup=setup)
        self._pool_for = (stage, setup)
        return self._pool

    def end_stage(self) -> None:
        """The stage is done: its worker processes go."""
        if self._pool is not None:
            self._pool.close()
            self._pool = self._pool_for = None

    def workers_for(self, stage, n_tasks: int) -> int:
        return max(1, min(self.num_proc, n_tasks))

    def map(self, stage, method: str, tasks: list[ShardTask]):
        """Results of `method` on each task, yielded in task order."""
        if not tasks:
            return
        workers = self.workers_for(stage, len(tasks))
        shown = MapProgress(stage, method, tasks, workers)
        if workers == 1:
            if needs_setup(stage, method) and not getattr(stage, "_set_up", False):
                try:
                    stage.setup()
                except Exception as exc:
                    raise StageFailed(setup_failure(stage.name, exc)) from exc
                stage._set_up = True
            progress.set_sink(shown.report)
            try:
                for i, task in enumerate(tasks):
                    result = run_task(stage, method, task, shown.key(i))
                    shown.done(i)
                    yield result
            finally:
                progress.set_sink(None)
            return
        pool = self._pool_of(stage, workers, setup=needs_setup(stage, method))
        try:
            yield from pool.map(method, tasks, shown)
        except BaseException:
            self.end_stage()             # a broken or interrupted pool is not reused
            raise

    def close(self) -> None:
        self.end_stage()


class WorkerPool:
    """Worker processes for a stage's shard tasks, results in task order, at most two tasks
    per worker in flight. A worker that cannot set up, or that dies (the kernel's
    out-of-memory killer sends SIGKILL), ends the stage with one line naming the cause:
    concurrent.futures marks the pool broken where multiprocessing.Pool would replace the
    worker and wait forever for its lost task."""

    def __init__(self, stage, num_proc: int, setup: bool = True):
        from concurrent.futures import ProcessPoolExecutor
        self.stage_name = stage.name
        self.num_proc = num_proc
        context = mp.get_context("spawn")
        # Documents done, reported by the workers' tasks; a thread hands them to the map's progress.
        self.reports = context.Queue()
        self.shown: MapProgress | None = None
        self._drain = threading.Thread(target=self._drain_reports, name="progress-reports", daemon=True)
        self._drain.start()
        # spawn: no inherited threads or locks from this process.
        self.executor = ProcessPoolExecutor(num_proc, mp_context=context, initializer=_init_worker,
                                            initargs=(type(stage), stage.config, stage.ctx, setup, self.reports))
        self.processes: dict = {}

    def _drain_reports(self) -> None:
        while True:
            item = self.reports.get()
            if item is None:
                return
            if self.shown is not None:
                self.shown.report(*item)

    def map(self, method: str, tasks: list[dict], shown: MapProgress | None = None):
        from collections import deque
        from concurrent.futures.process import BrokenProcessPool
        self.shown = shown
        in_flight: deque = deque()
        for i, task in enumerate(tasks):
            try:
                future = self.executor.submit(_task_in_worker, method, task, shown.key(i) if shown else None)
            except BrokenProcessPool:
                raise StageFailed(self._death()) from None
            # The executor starts workers as tasks arrive: note each one, to tell how it ended.
            self.processes.update(self.executor._processes or {})
            in_flight.append((i, future))
            while len(in_flight) > 2 * self.num_proc:
                yield self._done(*in_flight.popleft())
        while in_flight:
            yield self._done(*in_flight.popleft())

    def _done(self, index: int, future):
        result = self._result(future)
        if self.shown is not None:
            self.shown.done(index)
        return result

    def _result(self, future):
        from concurrent.futures.process import BrokenProcessPool
        try:
            return future.result()
        except BrokenProcessPool:
            raise StageFailed(self._death()) from None

    def _death(self) -> str:
        import signal
        import time
        # Let the executor's manager thread finish reaping first: if this thread and that one
        # call waitpid on the same dead worker at once, the loser sees ECHILD and its exitcode
        # reads None for a moment, which once turned the SIGKILL report into SIGTERM.
        self.executor.shutdown(wait=True, cancel_futures=True)
        deadline = time.monotonic() + 5
        codes = []
        for p in self.processes.values():
            p.join(timeout=max(0.0, deadline - time.monotonic()))
            while p.exitcode is None and time.monotonic() < deadline:
                time.sleep(0.01)
            codes.append(p.exitcode)
        # The pool terminates the surviving workers (SIGTERM) once one has died.
        dead = [c for c in codes if c not in (None, 0, -signal.SIGTERM)] or [c for c in codes if c]
        code = dead[0] if dead else None
        if code is not None and code < 0:
            sig = signal.Signals(-code).name
            msg = f"stage '{self.stage_name}': a worker process was killed by {sig}"
            if -code == signal.SIGKILL:
                msg += (" (most often the kernel's out-of-memory killer: lower num_proc or batch_size, "
                        "or give the run more memory)")
            return msg
        return f"stage '{self.stage_name}': a worker process exited unexpectedly (exit code {code})"

    def close(self) -> None:
        for p in self.processes.values():
            if p.exitcode is None:
                p.terminate()
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.reports.put(None)
        self._drain.join(timeout=5)
        self.reports.close()


# ---- ray -----------------------------------------------------------------------------------

class RayShardWorker:
    """A Ray Data actor: one stage instance, set up once in the constructor (unless the tasks
    need no model). Each item names the task method it runs, so one pool could serve all of a
    stage's map calls. Errors come back as values (one line), not as exceptions wrapped in
    Ray's tracebacks."""

    def __init__(self, stage_cls, config, ctx, setup: bool, reports=None):
        logging.basicConfig(level=logging.WARNING)
        if reports is not None:
            progress.set_sink(lambda key, n: reports.add.remote(key, n))
        self.error = None
        try:
            self.stage = stage_cls(config, ctx)
            if setup:
                self.stage.setup()
        except Exception as exc:
            self.error = setup_failure(stage_cls.name, exc)

    def __call__(self, batch: dict) -> dict:
        import numpy as np
        results = []
        for method, raw, phase, index in zip(batch["method"], batch["task"], batch["phase"], batch["index"]):
            if self.error is not None:
                results.append(json.dumps({"_error": self.error, "_user": True}))
                continue
            key = (int(phase), int(index)) if int(phase) >= 0 else None
            try:
                results.append(json.dumps(run_task(self.stage, str(method), ShardTask.from_json(raw), key)))
            except UserError as exc:          # a setup failure, an unreadable input file: one line
                results.append(json.dumps({"_error": str(exc), "_user": True}))
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0]
                results.append(json.dumps({"_error": f"stage '{self.stage.name}': {type(exc).__name__}: {first}",
                                           "_user": False}))
        return {"index": np.asarray(batch["index"]), "result": np.asarray(results, dtype=object)}


class RayExecutor:
    """Shard tasks on a Ray cluster: a local instance (`address` unset: tests, laptops) or a
    running cluster (`address: auto`). Per-stage worker counts follow the stage's cost:
    `workers: {phi: 400, langid: 4}`; unset, a stage gets one worker per CPU of the cluster."""
    kind = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None, workers: dict | None = None,
                 cpus_per_worker: float = 1.0):
        self.address = address
        self.num_cpus = num_cpus
        self.workers = dict(workers or {})
        self.cpus_per_worker = cpus_per_worker
        self._started_here = False
        self._counter = None

    def describe(self) -> dict:
        import ray
        out = {"kind": "ray", "address": self.address or "local", "ray": ray.__version__,
               "workers": self.workers, "cpus_per_worker": self.cpus_per_worker}
        if ray.is_initialized():
            out["cluster_cpus"] = int(ray.cluster_resources().get("CPU", 0))
        return out

    def start(self) -> None:
        import os

        import ray
        if ray.is_initialized():
            return
        os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
        kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
                  "configure_logging": True}
        # Workers import `pipeline` from the checkout: the driver's sys.path is theirs too.
        kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}}
        if self.address:
            ray.init(address=self.address, **kwargs)
        else:
            ray.init(num_cpus=self.num_cpus, **kwargs)
            self._started_here = True
        # Ray Data logs every dataset's plan at INFO: the run prints its own one line per stage.
        for name in ("ray", "ray.data"):
            logging.getLogger(name).setLevel(logging.WARNING)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.execution_options.preserve_order = True
        ctx.execution_options.verbose_progress = False

    def workers_for(self, stage, n_tasks: int) -> int:
        import ray
        n = self.workers.get(stage.name)
        if n is None:
            n = max(1, int(ray.cluster_resources().get("CPU", 1) // self.cpus_per_worker))
        return max(1, min(n, n_tasks))

    def map(self, stage, method: str, tasks: list[ShardTask]):
        """Results of `method` on each task, in task order."""
        if not tasks:
            return
        import ray
        from ray.data import ActorPoolStrategy
        shown = MapProgress(stage, method, tasks, self.workers.get(stage.name, 0))
        self.start()                      # starting Ray counts in the map's phase, not the one before
        size = self.workers_for(stage, len(tasks))
        if shown.tracker is not None:
            shown.tracker.workers = size
        phase = shown.phase if shown.phase is not None else -1
        items = [{"index": i, "phase": phase, "method": method, "task": t.to_json()} for i, t in enumerate(tasks)]
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        reports = self._reports() if shown.tracker is not None else None
        worker = (type(stage), stage.config, stage.ctx, needs_setup(stage, method), reports)
        out = ds.map_batches(RayShardWorker, fn_constructor_args=worker, batch_size=1,
                             compute=ActorPoolStrategy(size=size), num_cpus=self.cpus_per_worker, batch_format="numpy")
        with _polling(reports, shown):
            rows = sorted(out.take_all(), key=lambda r: int(r["index"]))
        for row in rows:
            shown.done(int(row["index"]))
            result = json.loads(row["result"])
            if "_error" in result:
                if result["_user"]:
                    raise StageFailed(result["_error"])
                raise RuntimeError(result["_error"])
            yield result

    def _reports(self):
        """The actor the workers' tasks report documents done to (one per executor)."""
        if self._counter is None:
            import ray
            self._counter = ray.remote(num_cpus=0)(ReportCounter).remote()
        return self._counter

    def end_stage(self) -> None:
        """Ray Data's actor pools end with each map call."""

    def close(self) -> None:
        self._counter = None
        if self._started_here:
            import ray
            ray.shutdown()
            self._started_here = False


class ReportCounter:
    """A Ray actor: documents done that the workers' tasks report, until the driver takes them."""

    def __init__(self):
        self.pending: list = []

    def add(self, key, n: int) -> None:
        self.pending.append((tuple(key), n))

    def take(self) -> list:
        out, self.pending = self.pending, []
        return out


@contextmanager
def _polling(counter, shown: MapProgress, interval: float = 0.5):
    """While the driver waits for a map's results: the reports, every `interval` seconds."""
    if counter is None:
        yield
        return
    import ray
    stop = threading.Event()

    def poll():
        while True:
            stopping = stop.wait(interval)
            for key, n in ray.get(counter.take.remote()):
                shown.report(key, n)
            if stopping:
                return
    thread = threading.Thread(target=poll, name="progress-ray", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def make_executor(executor_cfg, num_proc: int):
    if executor_cfg is None or executor_cfg.kind == "local":
        return LocalExecutor(num_proc)
    return RayExecutor(executor_cfg.address, executor_cfg.num_cpus, executor_cfg.workers,
                       executor_cfg.cpus_per_worker)
