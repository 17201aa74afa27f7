"""Progress of a stage as its shard tasks report documents done, for people and for logs.

Worker side: a task reading its input shard reports each batch it has finished with
`documents_done(n)` (pipeline/shards.py's readers do it after each batch they hand out, so every
task that reads a shard reports without code of its own). The report goes to the sink the
executor installed in that worker: a function call in the driver's own process, a
multiprocessing queue from local worker processes, a small Ray actor from Ray workers
(pipeline/executor.py). The executor also says when a task ends, so a task that reports
nothing still counts once it is done.

Driver side: the runner opens a `StageProgress` per stage (named by its folder, NN_name; it
knows no stage), and the executor opens a phase in it for each map of the stage's tasks (a
global stage maps several: signatures, partitions, write; a driver step such as clustering is
a phase without tasks, `StageInputs.phase`). Documents count when every task of the phase is
an input shard of known size, tasks otherwise. Shown:
- on a terminal: a bar per stage (done/total, docs/s, ETA, workers, the phase);
- elsewhere (CI, Slurm, Ray jobs): a line per stage at most every `every` seconds, as text or
  as JSON lines (`--log-format json`): stage, phase, done, total, unit, rate, elapsed, eta,
  workers. Counts and times only: never a document's text or id.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

# ---- how progress is shown (the command line sets it) ---------------------------------------


@dataclass
class Settings:
    enabled: bool = True
    log_format: str = "text"       # text | json: the form of progress and stage lines off a terminal
    every: float = 10.0            # seconds between progress lines off a terminal (per stage)
    tty: bool | None = None        # None: whether stderr is a terminal


SETTINGS = Settings()


def configure(*, enabled: bool | None = None, log_format: str | None = None, every: float | None = None) -> None:
    if enabled is not None:
        SETTINGS.enabled = enabled
    if log_format is not None:
        SETTINGS.log_format = log_format
    if every is not None:
        SETTINGS.every = every


def _on_tty() -> bool:
    return SETTINGS.tty if SETTINGS.tty is not None else sys.stderr.isatty()


def _now() -> str:
    from datetime import datetime, timezone
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def stage_line(label: str, text: str, **fields) -> None:
    """One of the lines about a stage (running, skipped, resuming, a warning, its counts): text,
    or a JSON line with a timestamp and `fields` (its `event`) under --log-format json."""
    if SETTINGS.log_format == "json":
        print(json.dumps({"time": _now(), "stage": label, **fields, "message": text}), file=sys.stderr, flush=True)
    else:
        print(f"[{label}] {text}", file=sys.stderr, flush=True)


def run_line(text: str, event: str, **fields) -> None:
    """A line about the whole command (done, an error, an interrupt): the text as it is, or a
    JSON line with a timestamp, the event and `fields` under --log-format json."""
    if SETTINGS.log_format == "json":
        print(json.dumps({"time": _now(), "event": event, **fields, "message": text}), file=sys.stderr, flush=True)
    else:
        print(text, file=sys.stderr, flush=True)


# ---- worker side ------------------------------------------------------------------------------

_sink = None                  # callable(task key, documents) installed by the executor
_task: tuple | None = None    # the key (phase id, task index) of the task this process is running


def set_sink(sink) -> None:
    global _sink
    _sink = sink


@contextmanager
def running_task(key: tuple[int, int] | None):
    """Reports from this process belong to the task `key` meanwhile."""
    global _task
    _task = tuple(key) if key is not None else None
    try:
        yield
    finally:
        _task = None


def documents_done(n: int) -> None:
    """A task has finished `n` more documents of its shard (nothing outside a task)."""
    if _sink is not None and _task is not None and n:
        _sink(_task, n)


class QueueSink:
    """From a local worker process: (task, documents) onto the pool's queue."""

    def __init__(self, queue):
        self.queue = queue

    def __call__(self, key: tuple, n: int) -> None:
        self.queue.put((key, n))


# ---- driver side ------------------------------------------------------------------------------

class StageProgress:
    """One stage's progress: its current phase's counts, shown as a bar or as lines."""

    def __init__(self, label: str):
        self.label = label
        self.lock = threading.Lock()
        self.tty = _on_tty()
        self.start = time.monotonic()
        self.phase_name: str | None = None
        self.phases = 0                  # phases opened so far: the current one's id
        self.unit = "doc"
        self.sizes: list[int] = []
        self.done: list[int] = []
        self.workers = 0
        self.phase_start = self.start
        self.bar: str | None = None      # the bar as last drawn (on a terminal)
        self.last_line = self.start
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name=f"progress-{label}", daemon=True)
        self._ticker.start()

    # -- phases and counts (the executor calls these) --
    def phase(self, name: str | None, sizes: list[int | None] | None = None, workers: int = 0) -> int:
        """A new phase: `sizes` the documents of each of its tasks (None where unknown), or
        no tasks at all (a driver step). Returns its id: task keys are (id, task index), so a
        late report of an earlier phase is not counted in this one."""
        with self.lock:
            self.phases += 1
            self.phase_name = name
            sizes = sizes or []
            if sizes and all(s is not None for s in sizes):
                self.unit, self.sizes = "doc", [int(s) for s in sizes]
            else:
                self.unit, self.sizes = "task", [1] * len(sizes)
            self.done = [0] * len(self.sizes)
            self.workers = workers
            self.phase_start = time.monotonic()
            self._show(force=True)
            return self.phases

    def report(self, key: tuple[int, int], n: int) -> None:
        phase, task = key
        with self.lock:
            if phase == self.phases and self.unit == "doc" and 0 <= task < len(self.done):
                self.done[task] = min(self.sizes[task], self.done[task] + n)
                self._show()

    def task_done(self, key: tuple[int, int]) -> None:
        phase, task = key
        with self.lock:
            if phase == self.phases and 0 <= task < len(self.done):
                self.done[task] = self.sizes[task]
                self._show()

    def close(self) -> None:
        self._stop.set()
        self._ticker.join(timeout=2)
        with self.lock:
            if self.bar is not None:
                self._bar(False)
                sys.stderr.write("\n")
                sys.stderr.flush()
                self.bar = None
            elif self.phases and not self.tty and SETTINGS.log_format == "json":
                # A last line per stage, with the final counts; also after a driver step, or the
                # last line could be a tick of the phase before it, printed mid-way.
                self._line()

    # -- what is shown --
    def snapshot(self) -> dict:
        done, total = sum(self.done), sum(self.sizes)
        elapsed = time.monotonic() - self.phase_start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 and total else None
        return {"stage": self.label, "phase": self.phase_name, "done": done, "total": total, "unit": self.unit,
                "rate": round(rate, 1), "elapsed": round(time.monotonic() - self.start, 1),
                "eta": round(eta, 1) if eta is not None else None, "workers": self.workers}

    def _show(self, force: bool = False) -> None:
        # Off a terminal, lines come from the ticker, at most every SETTINGS.every seconds.
        if self.tty:
            self._bar(force)

    def _bar(self, force: bool) -> None:
        """The stage's bar, redrawn in place: label and phase, percent, done/total, elapsed<ETA,
        rate, workers (tqdm's layout, drawn here so the width and the writes are ours)."""
        import shutil
        st = self.snapshot()
        desc = self.label + (f" {st['phase']}" if st["phase"] else "")
        unit = st["unit"]
        if st["total"]:
            right = (f" {st['done']:,}/{st['total']:,} [{_clock(st['elapsed'])}<{_clock(st['eta'])}, "
                     f"{st['rate']:,.1f} {unit}/s, {_workers(st['workers'])}]")
        else:                                           # a driver step: no tasks to count
            right = f" [{_clock(st['elapsed'])}, {_workers(st['workers'])}]"
        width = shutil.get_terminal_size().columns     # $COLUMNS, the terminal's, else 80
        if st["total"]:
            pct = st["done"] / st["total"]
            room = max(width - len(desc) - len(right) - 9, 0)
            filled = int(room * pct)
            line = f"{desc}: {100 * pct:3.0f}%|{'#' * filled}{' ' * (room - filled)}|{right}"
        else:
            line = f"{desc}:{right}"
        line = line[:max(width - 1, 1)]
        if force and self.bar is not None:
            sys.stderr.write("\n")                  # the last phase's bar stays above
        sys.stderr.write("\r" + line + " " * max(len(self.bar or "") - len(line), 0))
        sys.stderr.flush()
        self.bar = line

    def _line(self) -> None:
        s = self.snapshot()
        self.last_line = time.monotonic()
        if SETTINGS.log_format == "json":
            print(json.dumps({"time": _now(), "event": "progress", **s}), file=sys.stderr, flush=True)
            return
        where = f" {s['phase']}:" if s["phase"] else ""
        if s["total"]:
            pct = 100.0 * s["done"] / s["total"]
            eta = f", ETA {_duration(s['eta'])}" if s["eta"] is not None else ""
            body = (f"{s['done']:,}/{s['total']:,} {s['unit']}s ({pct:.0f}%), {s['rate']:,.1f} {s['unit']}s/s{eta}, "
                    f"{_workers(s['workers'])}")
        else:
            body = "on the driver"
        print(f"[{self.label}]{where} {body}, {_duration(s['elapsed'])} elapsed", file=sys.stderr, flush=True)

    def _tick(self) -> None:
        interval = 0.5 if self.tty else max(SETTINGS.every, 0.05)
        while not self._stop.wait(interval):
            with self.lock:
                if self.tty:
                    if self.bar is not None:
                        self._bar(False)            # elapsed and rate move while a batch runs
                elif self.phases and time.monotonic() - self.last_line >= SETTINGS.every:
                    self._line()


def _workers(n: int) -> str:
    return "on the driver" if not n else f"{n} worker{'' if n == 1 else 's'}"


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60:02d}:{seconds % 60:02d}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


_current: StageProgress | None = None


@contextmanager
def stage_progress(label: str, enabled: bool = True):
    """The runner's progress for one stage (nothing shown when progress is off: here, in the
    config's `progress`, or on the command line)."""
    global _current
    if not (enabled and SETTINGS.enabled):
        yield None
        return
    _current = StageProgress(label)
    try:
        yield _current
    finally:
        _current.close()
        _current = None


def current() -> StageProgress | None:
    """The running stage's progress, for the executor (None: no stage, or progress off)."""
    return _current
