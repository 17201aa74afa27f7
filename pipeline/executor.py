"""Executors: who runs a stage's shard tasks. The same contract for both (see shards.py):
a task is one input shard (pipeline/tasks.py), a worker holds one stage instance set up once
(models loaded once per worker), and a task writes its shard's files and marker itself, so
the driver only hands out tasks and commits.

An executor knows no stage. `map(stage.method, tasks)` takes a bound task method (marked
@shard_task) of a TaskOwner (pipeline/tasks.py: a stage, or the source reader), and asks the
owner only what TaskOwner declares (setup, loads_models, runs_without_models, workers_key).
Each worker builds the owner as `type(stage)(stage.config, stage.ctx)` and runs the method's
function on it through one loop, `WorkerStage` (bind once per stage, set up once before the
first task that loads models, a failure remembered). A task that loads no model
(`runs_without_models`) the local driver runs itself while its worker processes start.

- local: this process (num_proc 1) or a pool of spawned processes (concurrent.futures).
- ray: one pool of Ray actors per run (RayActorPool), started as stages need them and rebound
  to each stage in turn, as the local processes are; each actor sets a stage up once.
  Ray Data is not used: its `map_batches` builds a new actor pool for every dataset (every
  map call), and its file readers and writers merge blocks and name files at random.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pipeline import progress
from pipeline.errors import StageFailed, UserError
from pipeline.tasks import ShardTask, TaskKind, peak_rss_mb, task_parts

log = logging.getLogger("medprep")


class Executor(ABC):
    """Runs shard tasks: `map(stage.method, tasks)` yields each task's result in task order."""
    kind: str

    @abstractmethod
    def map(self, method: Callable, tasks: list[ShardTask]) -> Iterator[dict]:
        """Results of the bound task method on each task, in task order."""

    @abstractmethod
    def workers_for(self, stage, n_tasks: int) -> int:
        """How many workers the stage's map of `n_tasks` tasks gets."""

    def prestart(self, stage) -> None:
        """Start the workers now, not at the first map that waits for them."""

    def ready(self) -> bool:
        """Whether tasks given now start at once."""
        return True

    @abstractmethod
    def describe(self) -> dict:
        """The executor as the manifest records it."""

    @abstractmethod
    def stage_stats(self) -> dict:
        """What ran the current stage's tasks, for its stats."""

    def end_stage(self) -> None:
        """The current stage is done (its workers stay for the next one)."""

    def stage_usage(self) -> dict:
        """What the current stage's tasks cost in the workers: CPU seconds, summed, and the
        workers' peak resident memory (the driver's is the runner's to measure)."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Stop the workers."""


class WorkerUsage:
    """CPU seconds and peak resident memory of the tasks a stage ran in worker processes."""

    def __init__(self):
        self.cpu_seconds = 0.0
        self.peak_rss_mb: dict = {}           # worker (pid or actor) -> its peak

    def add(self, cpu_seconds: float, worker, rss_mb: int) -> None:
        self.cpu_seconds += cpu_seconds
        self.peak_rss_mb[worker] = max(self.peak_rss_mb.get(worker, 0), rss_mb)

    def summary(self) -> dict:
        if not self.peak_rss_mb:
            return {}
        return {"worker_cpu_seconds": round(self.cpu_seconds, 3), "worker_peak_rss_mb": max(self.peak_rss_mb.values())}


def task_usage() -> tuple[float, int]:
    """This process's CPU seconds so far and its peak resident memory in MB."""
    import time
    return time.process_time(), peak_rss_mb()


def stage_blob(stage) -> bytes:
    """What a worker builds its own instance of the stage from."""
    import pickle
    return pickle.dumps((type(stage), stage.config, stage.ctx))


def setup_failure(name: str, exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"stage '{name}': setup failed: {type(exc).__name__}: {first}"


class WorkerStage:
    """The one worker loop of every executor (a local worker process, the local driver, a Ray
    actor): the stage a worker holds, bound once per stage (the previous stage's instance and
    its models go first), set up once before the first task that loads models (a threshold-only
    rerun never does), its set-up failure remembered and raised for every later task."""

    def __init__(self):
        self.key = None
        self.stage = None
        self.name = ""
        self.set_up = False
        self.setups = 0
        self.error: str | None = None

    def bind(self, key, build: Callable[[], object], name: str) -> None:
        """Hold the stage `key` (built by `build()` unless it is the one held)."""
        if key == self.key:
            return
        self.drop()
        self.key, self.name = key, name
        try:
            self.stage = build()
        except Exception as exc:
            self.error = setup_failure(name, exc)

    def bind_blob(self, key, blob: bytes) -> None:
        if key != self.key:
            import pickle
            stage_cls, config, ctx = pickle.loads(blob)
            self.bind(key, lambda: stage_cls(config, ctx), stage_cls.name)

    def drop(self) -> None:
        """The stage instance and its models go (the worker stays for a later stage)."""
        import gc
        had_models = self.set_up and self.stage.loads_models()
        self.key, self.stage, self.error, self.setups, self.set_up = None, None, None, 0, False
        if had_models:
            gc.collect()

    def run(self, func: Callable, task: ShardTask, progress_key: tuple | None = None) -> dict:
        """`func(stage, task)`; the documents it reports count for `progress_key` (progress.py)."""
        if self.error is None and not self.set_up and func.shard_task.loads_models:
            self.set_up = True
            try:
                self.stage.setup()
                self.setups += 1
            except Exception as exc:
                self.error = setup_failure(self.name, exc)
        if self.error is not None:
            raise StageFailed(self.error)
        with progress.running_task(progress_key):
            return func(self.stage, task)


class MapProgress:
    """A map's phase in the running stage's progress (pipeline/progress.py): its tasks' sizes
    (documents of each input shard, or tasks), the worker count, and each task's key."""

    def __init__(self, kind: TaskKind, tasks: list[ShardTask], workers: int):
        self.tracker = progress.current()
        self.phase = None
        if self.tracker is not None:
            sizes = [t.shard.rows if t.shard is not None else None for t in tasks]
            self.phase = self.tracker.phase(kind.phase, sizes, workers)

    def key(self, index: int) -> tuple[int, int] | None:
        return (self.phase, index) if self.phase is not None else None

    def report(self, key, n: int) -> None:
        if self.tracker is not None:
            self.tracker.report(tuple(key), n)

    def done(self, index: int) -> None:
        if self.tracker is not None:
            self.tracker.task_done(self.key(index))


# ---- local ---------------------------------------------------------------------------------

# The stage a local worker process holds (one per process).
_worker = WorkerStage()


def _init_worker(reports=None):
    logging.basicConfig(level=logging.WARNING)
    import atexit
    import signal

    # Ctrl-C reaches the whole process group: the driver alone answers it (one line, its pool
    # shut down); a worker would print a traceback of wherever it was.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    # A worker leaves once the pool is shut down, its tasks done and their results sent (the
    # progress queue flushed by multiprocessing before this runs): tearing down the engines'
    # modules would only add to the run's wall time.
    atexit.register(_leave_now)
    if reports is not None:
        progress.set_sink(progress.QueueSink(reports))
    # A worker waits on its task queue, whose write end every worker holds too: when the
    # driver dies (the out-of-memory killer's SIGKILL), no end-of-file comes, and the workers
    # would stay forever, holding the run's memory and the user's terminal. They leave with it.
    parent = mp.parent_process()
    if parent is not None:
        threading.Thread(target=_leave_with, args=(parent.sentinel,), name="leave-with-driver", daemon=True).start()


def _leave_with(sentinel: int) -> None:
    from multiprocessing.connection import wait
    wait([sentinel])
    os._exit(1)


def _leave_now() -> None:
    import os
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(0)


def _started() -> None:
    """WorkerPool.warm's task: the process is up (its initializer ran)."""


def _task_in_worker(key: int, blob: bytes, func: Callable, task: ShardTask, progress_key: tuple | None = None):
    """(the task's result, its CPU seconds, this worker's pid and peak resident MB)."""
    cpu0, _ = task_usage()
    _worker.bind_blob(key, blob)
    result = _worker.run(func, task, progress_key)
    cpu1, rss = task_usage()
    return result, cpu1 - cpu0, os.getpid(), rss


class LocalExecutor(Executor):
    """Shard tasks in this process (one task, or num_proc 1) or in num_proc worker processes.
    The processes are started once per run and serve every stage in turn: each builds a
    stage's instance at its first task and sets it up at the first task that needs the
    models, once for all of the stage's map calls. Starting a process and importing the
    engines costs about a second, paid once instead of once per stage (a retune reruns
    seven stages on little data)."""
    kind = "local"

    def __init__(self, num_proc: int = 1):
        self.num_proc = num_proc
        self._pool: WorkerPool | None = None
        self._here = WorkerStage()       # the driver's own tasks, on the stage instance itself
        self.usage = WorkerUsage()
        self._stage = None               # the stage the workers hold now, and its number
        self._stage_key = 0
        self._stage_blob = b""
        self._stage_workers = 1

    def describe(self) -> dict:
        return {"kind": "local", "num_proc": self.num_proc}

    def stage_stats(self) -> dict:
        """The stage's worker processes (1: the driver ran its tasks)."""
        return {"workers": self._stage_workers}

    def stage_usage(self) -> dict:
        return self.usage.summary()

    def end_stage(self) -> None:
        """The stage is done (its workers stay for the next stage)."""
        self._stage, self._stage_workers = None, 1
        self.usage = WorkerUsage()

    def workers_for(self, stage, n_tasks: int) -> int:
        return max(1, min(self.num_proc, n_tasks))

    def prestart(self, stage) -> None:
        """Start the worker processes now, not at a map that waits for them: they start and
        import while the driver works (reading the source into shards; running tasks that
        load no model)."""
        if self.num_proc > 1 and self._pool is None:
            self._pool = WorkerPool(self.num_proc)
            self._pool.warm()

    def ready(self) -> bool:
        """Whether tasks given now start at once: the worker processes are up (prestarted ones
        have finished starting), or there are none to wait for."""
        return self.num_proc <= 1 or (self._pool is not None and self._pool.started())

    def map(self, method: Callable, tasks: list[ShardTask]):
        """Results of the bound task method on each task, yielded in task order."""
        stage, func, kind = task_parts(method)
        if not tasks:
            return
        workers = self.workers_for(stage, len(tasks))
        shown = MapProgress(kind, tasks, workers)
        here = len(tasks) if workers == 1 else 0
        if workers > 1 and not self.ready() and stage.runs_without_models(method, tasks[0]):
            # Tasks that load no model (a filter deciding again from its stored scores, de-identification
            # answered by its cache, the global stages on a retune's few documents) cost less
            # than waiting for the processes: this process runs them while the processes
            # start, and hands the rest over once they are up.
            self.prestart(stage)
            here = 1
        i = 0
        if here:
            self._here.bind(id(stage), lambda: stage, stage.name)
            progress.set_sink(shown.report)
            try:
                while i < len(tasks) and (
                        i < here or (not self.ready() and stage.runs_without_models(method, tasks[i]))):
                    result = self._here.run(func, tasks[i], shown.key(i))
                    shown.done(i)
                    i += 1
                    yield result
            finally:
                progress.set_sink(None)
            if i == len(tasks):
                return
        if self._stage is not stage:
            self._stage, self._stage_key = stage, self._stage_key + 1
            self._stage_blob = stage_blob(stage)
        self._stage_workers = max(self._stage_workers, workers)
        if self._pool is None:
            self._pool = WorkerPool(self.num_proc)
        try:
            for result, cpu, pid, rss in self._pool.map(stage.name, self._stage_key, self._stage_blob, func, tasks[i:],
                                                        shown, first=i):
                self.usage.add(cpu, pid, rss)
                yield result
        except BaseException:
            self._close_pool()  # a broken or interrupted pool is not reused
            raise

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def close(self) -> None:
        self.end_stage()
        self._close_pool()


class WorkerPool:
    """Worker processes for a stage's shard tasks, results in task order, at most two tasks
    per worker in flight. A worker that cannot set up, or that dies (the kernel's
    out-of-memory killer sends SIGKILL), ends the stage with one line naming the cause:
    concurrent.futures marks the pool broken where multiprocessing.Pool would replace the
    worker and wait forever for its lost task."""

    def __init__(self, num_proc: int):
        from concurrent.futures import ProcessPoolExecutor

        self.stage_name = ""
        self.num_proc = num_proc
        context = mp.get_context("spawn")
        # Documents done, reported by the workers' tasks; a thread hands them to the map's progress.
        self.reports = context.Queue()
        self.shown: MapProgress | None = None
        self._stop_drain = threading.Event()
        self._drain = threading.Thread(target=self._drain_reports, name="progress-reports", daemon=True)
        self._drain.start()
        # spawn: no inherited threads or locks from this process.
        self.executor = ProcessPoolExecutor(
            num_proc, mp_context=context, initializer=_init_worker, initargs=(self.reports,)
        )
        # The pool's workers, to tell later how one ended: the multiprocessing children started
        # since the pool was made (multiprocessing.active_children, public; the pool does not
        # expose its own).
        self.processes: dict = {}
        self._children_before = set(mp.active_children())
        self._warming: list = []

    def warm(self) -> None:
        """A no-op task per worker, not waited for: each submit starts a process."""
        self._warming = [self.executor.submit(_started) for _ in range(self.num_proc)]
        self._note_workers()

    def _note_workers(self) -> None:
        self.processes.update({p.pid: p for p in mp.active_children() if p not in self._children_before})

    def started(self) -> bool:
        """Whether the processes warm() started have run their no-op task (they are up)."""
        return all(f.done() for f in self._warming)

    def _drain_reports(self) -> None:
        import queue

        # Stopped by an event, not by a sentinel put on the queue: a put would start this
        # process's feeder thread, which holds the queue's semaphore and, cut off at exit,
        # leaves it unlinked but registered (the resource tracker's warning after our last line).
        while not self._stop_drain.is_set():
            try:
                item = self.reports.get(timeout=0.1)
            except queue.Empty:
                continue
            if self.shown is not None:
                self.shown.report(*item)

    def map(
        self,
        stage_name: str,
        key: int,
        blob: bytes,
        func: Callable,
        tasks: list[ShardTask],
        shown: MapProgress | None = None,
        first: int = 0,
    ):
        """Results of `tasks` in order; `first`: the map's index of tasks[0] (for progress)."""
        from collections import deque
        from concurrent.futures.process import BrokenProcessPool

        self.stage_name = stage_name
        self.shown = shown
        in_flight: deque = deque()
        for i, task in enumerate(tasks):
            try:
                future = self.executor.submit(
                    _task_in_worker, key, blob, func, task, shown.key(first + i) if shown else None
                )
            except BrokenProcessPool:
                raise StageFailed(self._death()) from None
            # The executor starts workers as tasks arrive: note each one, to tell how it ended.
            self._note_workers()
            in_flight.append((first + i, future))
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
                msg += (
                    " (most often the kernel's out-of-memory killer: lower num_proc or batch_size, "
                    "or give the run more memory)"
                )
            return msg
        return f"stage '{self.stage_name}': a worker process exited unexpectedly (exit code {code})"

    def close(self) -> None:
        # Shut down before terminating: a worker killed while its queue thread writes a progress
        # report dies holding the queue's write lock (this process only reads the queue, so no
        # thread of its own waits on that lock).
        self.executor.shutdown(wait=True, cancel_futures=True)
        for p in self.processes.values():
            if p.exitcode is None:
                p.terminate()
        self._stop_drain.set()
        self._drain.join(timeout=5)
        self.reports.close()


# ---- ray -----------------------------------------------------------------------------------


class RayShardWorker:
    """A Ray actor of the run's pool (RayActorPool): it serves every stage in turn, like a local
    worker process. Each task names its stage by a key and a pickled (stage class, config, ctx)
    blob; at the stage's first task the actor drops the previous stage's instance (and its
    models) and builds the new one, and it sets the stage up once, before the first task whose
    method needs the models (a threshold-only rerun never loads them). Each result carries
    where it ran (node) and how many setups the actor did for this stage. Errors come back as
    values (one line), not as exceptions wrapped in Ray's tracebacks."""

    def __init__(self, reports=None):
        logging.basicConfig(level=logging.WARNING)
        if reports is not None:
            progress.set_sink(lambda key, n: reports.add.remote(key, n))
        self.worker = WorkerStage()

    def drop(self) -> None:
        """The stage instance and its models go (the actor stays for a later stage)."""
        self.worker.drop()

    def run(self, key: int, blob: bytes, func: Callable, raw: str, progress_key: list | None = None) -> dict:
        import ray

        self.worker.bind_blob(key, blob)
        where = {"node": ray.get_runtime_context().get_node_id()}
        try:
            cpu0, _ = task_usage()
            result = self.worker.run(func, ShardTask.from_json(raw), tuple(progress_key) if progress_key else None)
            cpu1, rss = task_usage()
            return {"result": result, "setups": self.worker.setups, "cpu_seconds": cpu1 - cpu0, "rss_mb": rss,
                    **where}
        except (UserError, StageFailed) as exc:  # an unreadable input file, a failed setup: one line
            return {"error": str(exc), "user": True, "setups": self.worker.setups, **where}
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            return {
                "error": f"stage '{self.worker.name}': {type(exc).__name__}: {first}",
                "user": False,
                "setups": self.worker.setups,
                **where,
            }


class RayActorPool:
    """The run's actors, started as stages need them and killed when the run ends (or when one
    dies, or a map is interrupted): every stage, and every map call of a stage (a global
    stage's signatures, partitions, writes), runs on them, so actor start-up and imports are
    paid once per run, not once per stage. A stage uses the first `size` actors (its
    `workers` count); the pool grows when a stage wants more than it has. Results in task
    order; every task runs even after one failed (each writes its own marker, so a rerun
    resumes with only the failed shards), then the first failure is raised. `stats` are the
    current stage's: actors used, nodes, map calls, setups."""

    def __init__(self, cpus_per_worker: float, reports=None):
        import ray

        # `reports`: the executor's ReportCounter, which the actors' tasks tell documents done
        # (a task without a progress key reports nothing).
        self._new_actor = lambda: ray.remote(num_cpus=cpus_per_worker, max_restarts=0)(RayShardWorker).remote(reports)
        self.actors: list = []
        self.stage_name = ""
        self._stage = None
        self._key = 0
        self._blob = None
        self._sizes: dict[int, int] = {}  # actor index -> size of the stage it holds
        self.begin_stage(None)

    @property
    def size(self) -> int:
        return len(self.actors)

    @property
    def holds_stage(self) -> bool:
        """Whether a stage is bound (its tasks mapped or about to be)."""
        return self._stage is not None

    def begin_stage(self, stage) -> None:
        self._stage = stage
        self.usage = WorkerUsage()
        self.used: set[int] = set()  # actor indexes that ran the stage's tasks
        self.nodes: set[str] = set()
        self.setups: dict[int, int] = {}  # actor index -> setups it ran for the stage
        self.map_calls = 0

    def bind(self, stage, size: int) -> None:
        """`stage`'s tasks go to the first `size` actors (started if the pool has fewer)."""
        import ray

        if stage is not self._stage:
            self.begin_stage(stage)
            self.stage_name = stage.name
            self._key += 1
            self._blob = ray.put(stage_blob(stage))
            # Actors this stage does not use let the previous stage's models go now.
            for a in range(size, len(self.actors)):
                self.actors[a].drop.remote()
        self.grow(size)

    def grow(self, size: int) -> None:
        """At least `size` actors (creating one returns at once: its process starts meanwhile)."""
        while len(self.actors) < size:
            self.actors.append(self._new_actor())

    def map(self, func: Callable, tasks: list[ShardTask], size: int, shown: MapProgress | None = None):
        import ray
        from ray.exceptions import RayActorError

        self.map_calls += 1
        idle = list(range(min(size, self.size)))[::-1]
        pending: dict = {}  # object ref -> (task index, actor index)
        done: dict[int, dict] = {}
        next_task = next_out = 0
        failure = None
        while next_out < len(tasks):
            while idle and next_task < len(tasks):
                a = idle.pop()
                key = shown.key(next_task) if shown else None
                ref = self.actors[a].run.remote(self._key, self._blob, func, tasks[next_task].to_json(), key)
                pending[ref] = (next_task, a)
                next_task += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            i, a = pending.pop(ready[0])
            try:
                out = ray.get(ready[0])
            except RayActorError as exc:
                # The actor's process died (the out-of-memory killer, most often): its tasks
                # are lost; the stage ends with one line.
                raise StageFailed(
                    f"stage '{self.stage_name}': a Ray worker died ({type(exc).__name__}; most "
                    "often the out-of-memory killer: lower batch_size or the stage's workers, "
                    "or give the workers more memory)"
                ) from None
            idle.append(a)
            self.used.add(a)
            self.nodes.add(out["node"])
            self.setups[a] = out["setups"]
            if "cpu_seconds" in out:
                self.usage.add(out["cpu_seconds"], a, out["rss_mb"])
            done[i] = out
            while next_out in done:
                out = done.pop(next_out)
                next_out += 1
                if "error" in out:
                    failure = failure or out
                elif failure is None:
                    if shown is not None:
                        shown.done(next_out - 1)
                    yield out["result"]
        if failure is not None:
            if failure["user"]:
                raise StageFailed(failure["error"])
            raise RuntimeError(failure["error"])

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []


class RayExecutor(Executor):
    """Shard tasks on a Ray cluster: a local instance (`address` unset: tests, laptops) or a
    running cluster (`address: auto`). Per-stage worker counts follow the stage's cost:
    `workers: {NAME: 400, OTHER: 4}`; unset, a stage gets one worker per CPU of the cluster.
    One actor pool per run, rebound to each stage in turn (RayActorPool)."""

    kind = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        workers: dict | None = None,
        cpus_per_worker: float = 1.0,
    ):
        self.address = address
        self.num_cpus = num_cpus
        self.workers = dict(workers or {})
        self.cpus_per_worker = cpus_per_worker
        self._started_here = False
        self._pool: RayActorPool | None = None
        self._counter = None

    def describe(self) -> dict:
        import ray

        out = {
            "kind": "ray",
            "address": self.address or "local",
            "ray": ray.__version__,
            "workers": self.workers,
            "cpus_per_worker": self.cpus_per_worker,
        }
        if ray.is_initialized():
            out["cluster_cpus"] = int(ray.cluster_resources().get("CPU", 0))
            out["cluster_nodes"] = sum(1 for n in ray.nodes() if n.get("Alive"))
        return out

    def start(self) -> None:
        import os

        import ray

        if ray.is_initialized():
            return
        os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
        # Errors only while Ray starts: its start-up notices (token authentication's, for one)
        # would land in the run's stderr across the JSON log lines; warnings again after.
        kwargs = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.ERROR,
            "configure_logging": True,
        }
        # Workers import `pipeline` from the checkout: the driver's sys.path is theirs too.
        pythonpath = os.pathsep.join(p for p in sys.path if p)
        if self.address:
            kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": pythonpath}}
            ray.init(address=self.address, **kwargs)
        else:
            # "local": a new instance of our own, even when a cluster started by `ray start`
            # runs on this machine (no address would join that one). Its processes inherit
            # the driver's environment, so PYTHONPATH goes there for the start: a job
            # runtime_env would make Ray start fresh workers beside the ones it prestarts
            # (~1 s later actors, ~1.5 s of CPU).
            before = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = pythonpath
            try:
                ray.init(address="local", num_cpus=self.num_cpus, **kwargs)
            finally:
                if before is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = before
            self._started_here = True
        for name in ("ray",):
            logging.getLogger(name).setLevel(logging.WARNING)

    def ready(self) -> bool:
        """Whether Ray is up and the run's actors exist (prestart or a map made them)."""
        return self._pool is not None

    def prestart(self, stage) -> None:
        """Ray and the stage's actors started now, not at its first map: the driver is about to
        read the source into shards, and the actors' processes start and import meanwhile
        (a few seconds each)."""
        self.start()
        if self._pool is None:
            self._pool = RayActorPool(self.cpus_per_worker, self._reports())
        self._pool.grow(self.workers_for(stage, 1 << 30))

    def workers_for(self, stage, n_tasks: int) -> int:
        import ray

        n = self.workers.get(stage.workers_key)
        if n is None:
            self.start()  # asked before any map (a stage's driver threads): Ray must be up
            n = max(1, int(ray.cluster_resources().get("CPU", 1) // self.cpus_per_worker))
        return max(1, min(n, n_tasks))

    def map(self, method: Callable, tasks: list[ShardTask]):
        """Results of the bound task method on each task, in task order."""
        stage, func, kind = task_parts(method)
        if not tasks:
            return
        shown = MapProgress(kind, tasks, self.workers.get(stage.name, 0))
        self.start()  # starting Ray counts in the map's phase, not the one before
        size = self.workers_for(stage, len(tasks))
        if shown.tracker is not None:
            shown.tracker.workers = size
        if self._pool is None:
            self._pool = RayActorPool(self.cpus_per_worker, self._reports())
        self._pool.bind(stage, size)
        try:
            with _polling(self._counter if shown.tracker is not None else None, shown):
                yield from self._pool.map(func, tasks, size, shown if shown.tracker is not None else None)
        except BaseException:
            self._close_pool()  # a broken or interrupted pool is not reused
            raise

    def stage_stats(self) -> dict:
        """The stage's actors: how many ran its tasks, on how many nodes, how many map calls
        they served and how many setups they ran for it in all (at most one each)."""
        pool = self._pool
        if pool is None or not pool.holds_stage:
            return {}
        return {
            "workers": len(pool.used),
            "nodes": len(pool.nodes),
            "map_calls": pool.map_calls,
            "setups": sum(pool.setups.values()),
        }

    def stage_usage(self) -> dict:
        pool = self._pool
        return pool.usage.summary() if pool is not None and pool.holds_stage else {}

    def _reports(self):
        """The actor the workers' tasks report documents done to (one per executor)."""
        if self._counter is None:
            import ray

            self._counter = ray.remote(num_cpus=0)(ReportCounter).remote()
        return self._counter

    def end_stage(self) -> None:
        """The stage is done (its actors stay for the next stage)."""
        if self._pool is not None:
            self._pool.begin_stage(None)

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def close(self) -> None:
        self._close_pool()
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
    return RayExecutor(executor_cfg.address, executor_cfg.num_cpus, executor_cfg.workers, executor_cfg.cpus_per_worker)
