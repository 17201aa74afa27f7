"""The source, cut into a first stage's input shards (in <stage>.tmp/input/, which commit
removes), with the records the reader set aside in each and the repeated-id count.

Several input files and no `limit`: one task per file on the executor (PubMed's baseline is
1,334 files), shards named FILE-K (file index, then K-th `shard_size` slice of that file).
One file, or a `limit` (which cuts across files in order): the driver reads the source in
order, shards named K (a PubMed XML file's citations are parsed on the workers meanwhile:
ChunkParser). Either way names sort in source order, and the bytes do not depend on
the executor or the number of workers. Kept across an interrupted run of the same
fingerprint, so a resumed first stage does not read the source again."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from pipeline.documents import SOURCE
from pipeline.inputs import IdCounter, StageInputs
from pipeline.readers import expand_paths, pubmed_xml, read_documents
from pipeline.runpath import RunPath, load_npy, read_json, save_npy, write_json
from pipeline.shards import ArrowFile, ShardWriter
from pipeline.tasks import InputShard, ShardTask, TaskOwner, shard_task

DONE = "_DONE.json"


def _write_shards(batches, folder: RunPath, shard_size: int, prefix: str, ids: IdCounter,
                  source: str | None = None) -> tuple[list, object, int]:
    """Documents to shards of `shard_size` rows; a batch's set-aside records go to the shard its
    first document lands in (the last shard for trailing ones). Returns ([name, rows], schema,
    the documents' text in UTF-8 bytes: what the run folder's size is compared with)."""
    text_bytes = 0
    if source is not None:
        # A multi-source run: every document carries its source, every shard's name starts with it.
        prefix = f"{source}.{prefix}"
        batches = with_source(batches, source)
    writer = ShardWriter(folder, None, shard_size, prefix=prefix)
    asides: dict[int, list] = {}
    empty_schema = None
    for batch in batches:
        if batch.set_aside:
            asides.setdefault(writer.rows // shard_size, []).extend(batch.set_aside)
        if batch.table.num_rows:
            ids.add(batch.table["id"])
            text_bytes += pc.sum(pc.binary_length(batch.table["text"])).as_py() or 0
            writer.write(batch.table)
        elif empty_schema is None:
            empty_schema = batch.table.schema
    writer.close()
    names = list(writer.names)
    counts = [min(shard_size, writer.rows - i * shard_size) for i in range(len(names))]
    if not names and asides:
        # Nothing but set-aside records: one empty shard carries them.
        ArrowFile(folder / f"{prefix}00000.arrow", empty_schema).close()
        names, counts = [f"{prefix}00000"], [0]
    last = max(len(names) - 1, 0)
    by_shard: dict[int, list] = {}
    for idx, rows in sorted(asides.items()):
        by_shard.setdefault(min(idx, last), []).extend(rows)
    for idx, rows in by_shard.items():
        write_json(folder / f"{names[idx]}.aside.json", rows)
    return [[n, c] for n, c in zip(names, counts)], writer.schema, text_bytes


def with_source(batches, source: str):
    """The reader's batches with a `source` column (the source's name on every row)."""
    import pyarrow as pa
    for batch in batches:
        table = batch.table
        column = pa.array([source] * table.num_rows, pa.string())
        if SOURCE in table.column_names:
            table = table.set_column(table.column_names.index(SOURCE), SOURCE, column)
        else:
            table = table.append_column(SOURCE, column)
        yield replace(batch, table=table)


class SourceReader(TaskOwner):
    """Reads one input file into shards: the task an executor runs per file. Not a stage: a
    task owner (pipeline/tasks.py), as stages are."""
    name = "read"

    def __init__(self, config=None, ctx=None, workers_of: str | None = None):
        self.config, self.ctx = config, ctx
        # The stage whose worker count the reading takes (the first stage: it reads the source).
        self.workers_of = workers_of

    @property
    def workers_key(self) -> str:
        return self.workers_of or self.name

    @shard_task(phase="reading the source")
    def ingest_file(self, task: ShardTask) -> dict:
        from pipeline.config import InputConfig
        p = task.params
        cfg = InputConfig.model_validate({**p["input"], "paths": [p["file"]]})
        ids = IdCounter()
        shards, schema, text_bytes = _write_shards(read_documents(cfg, task.batch_size), task.folder,
                                                   p["shard_size"], f"{p['index']:05d}-", ids, p.get("source"))
        hashes = np.concatenate(ids.hashes) if ids.hashes else np.zeros(0, np.uint64)
        save_npy(task.folder / f"ids-{p['index']:05d}.npy", hashes)
        return {"shards": shards, "schema": schema.to_string() if schema is not None else None,
                "text_bytes": text_bytes}

    @shard_task(phase="reading the source")
    def parse_chunk(self, task: ShardTask) -> dict:
        """A chunk of raw PubMed citations (ChunkParser's file) parsed into their documents."""
        import pickle
        return pubmed_xml.parse_chunk(pickle.loads((task.folder / task.params["name"]).read_bytes()))


class ChunkParser:
    """Where the driver's reading of a PubMed XML file parses the citations it cuts
    (pubmed_xml._citations_in_chunks): on the executor's workers, a task per chunk, when the
    reading stage has two or more; in this process otherwise. The cut and the well-formedness
    check of the whole file stay here, in file order; the parsing, about two thirds of the
    reading, runs beside (10,000 abstracts read with 2 local workers up: 2.1-2.4 s against
    3.3-3.4 s, timed once here). While the workers are still starting, up to BACKLOG windows
    wait for them and the driver parses the oldest itself. The documents and batches are the
    same wherever the chunks are parsed."""

    BACKLOG = 2

    def __init__(self, executor, folder: RunPath, batch_size: int, stage_name: str | None = None,
                 limit: int | None = None):
        self.executor = executor
        self.folder = folder / "parse"
        self.batch_size = batch_size
        self.reader = SourceReader(workers_of=stage_name)
        self.window = 4 * pubmed_xml.CHUNK_CITATIONS     # citations cut before they are submitted
        # The input's `limit` (documents): once as many citations are cut, each window is
        # handed on before the next is cut, so a small limit is not cut far past.
        self.limit = limit
        self.cut = 0
        self.waiting: list[_Window] = []          # submitted while the workers were starting
        self.maps: list[_Parsing] = []
        self._written = 0

    def _workers(self) -> int | None:
        """The reading's workers, None while they are starting."""
        ready = getattr(self.executor, "ready", None)
        if ready is None or not ready():
            return None
        return self.executor.workers_for(self.reader, 1 << 30)

    def ahead(self) -> int:
        """How many submitted windows may wait before the oldest is handed on."""
        workers = self._workers()
        if self.limit is not None and self.cut >= self.limit:
            return 0
        return self.BACKLOG if workers is None else (1 if workers >= 2 else 0)

    def submit(self, chunks: list[list[bytes]]) -> "_Window":
        window = _Window(self, chunks)
        self.cut += sum(len(chunk) for chunk in chunks)
        workers = self._workers()
        if (workers is not None and workers < 2) or (self.limit is not None and self.limit <= self.window):
            # One worker; or an input of one window, whose cut is over before any parsing
            # could run beside it (sending it away would only add the transfer).
            window.results = self._here(chunks)
            return window
        self.waiting.append(window)
        if workers is not None:
            # Two chunks per worker and window: none waits long for the window's last.
            self.window = 2 * workers * pubmed_xml.CHUNK_CITATIONS
            self._start_waiting()
        return window

    @staticmethod
    def _here(chunks) -> list[dict]:
        return [pubmed_xml.parse_chunk(chunk) for chunk in chunks]

    def _start_waiting(self) -> None:
        """Every waiting window's chunks to the workers, as one map."""
        import pickle
        windows, self.waiting = self.waiting, []
        self.folder.mkdir()
        tasks = []
        for window in windows:
            window.first = len(tasks)
            for chunk in window.chunks:
                name = f"{self._written:06d}.pkl"
                self._written += 1
                (self.folder / name).write_bytes(pickle.dumps(chunk, protocol=5))
                tasks.append(ShardTask(self.folder, batch_size=self.batch_size, params={"name": name}))

        def parse():
            try:
                yield from self.executor.map(self.reader.parse_chunk, tasks)
            finally:
                for task in tasks:
                    (self.folder / task.params["name"]).unlink(missing_ok=True)
        parsing = _Parsing(parse)
        self.maps.append(parsing)
        for window in windows:
            window.parsing = parsing

    def close(self) -> None:
        """The reading has ended: every map under way finishes, and the chunk files go."""
        self.waiting = []
        for parsing in self.maps:
            parsing.wait()
        self.maps = []
        self.folder.rmtree()

    def _result(self, window: "_Window") -> list[dict]:
        if window.results is None:
            if window.parsing is None:            # still waiting for the workers
                workers = self._workers()
                if workers is None or workers < 2:
                    self.waiting.remove(window)
                    window.results = self._here(window.chunks)
                    return window.results
                self._start_waiting()
            window.results = window.parsing.take(window.first, len(window.chunks))
        return window.results


class _Window:
    """A window of chunks submitted to a ChunkParser: parsed here, waiting, or being parsed."""

    def __init__(self, parser: ChunkParser, chunks: list[list[bytes]]):
        self.parser, self.chunks = parser, chunks
        self.results: list[dict] | None = None
        self.parsing: _Parsing | None = None
        self.first = 0

    def result(self) -> list[dict]:
        return self.parser._result(self)

    def abandon(self) -> None:
        """Not wanted any more: a waiting window is dropped (one being parsed ends at close)."""
        if self in self.parser.waiting:
            self.parser.waiting.remove(self)


class _Parsing:
    """Results the executor's workers make, collected in a thread of this process as they
    come (in task order), so the reading hands on a window's documents as soon as its chunks
    are parsed while the driver cuts the next window."""

    def __init__(self, parse):
        import threading
        self.results: list[dict] = []
        self.error: BaseException | None = None
        self.finished = False
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._run, args=(parse,), name="medprep-parse", daemon=True)
        self.thread.start()

    def _run(self, parse) -> None:
        try:
            for result in parse():
                with self.changed:
                    self.results.append(result)
                    self.changed.notify_all()
        except BaseException as exc:         # raised again in the reading thread, by take()
            self.error = exc
        with self.changed:
            self.finished = True
            self.changed.notify_all()

    def take(self, first: int, count: int) -> list[dict]:
        """Results first .. first+count-1, once they are there (not kept here after)."""
        end = first + count
        with self.changed:
            self.changed.wait_for(lambda: len(self.results) >= end or self.finished)
            if len(self.results) < end:
                raise self.error or RuntimeError("the parsing ended early")
            out = self.results[first:end]
            self.results[first:end] = [None] * count
            return out

    def wait(self) -> None:
        self.thread.join()


def reads_on_driver(input_cfg) -> bool:
    """Whether ingest_source reads on the driver whatever the executor: a `limit` (documents
    in order) or a single file."""
    if input_cfg.limit is not None:
        return True
    try:
        return len(expand_paths(input_cfg.paths)) <= 1
    except Exception:
        return False                          # ingest_source names the problem


def ingest_source(input_cfg, run, folder: RunPath, executor=None, source: str | None = None,
                  stage_name: str | None = None) -> StageInputs:
    """The source cut into shards in `folder` (`source`: a multi-source run's source name), by
    the workers of the stage `stage_name` (the first stage, which reads it)."""
    done = folder / DONE
    t0 = time.perf_counter()
    if not done.exists():
        folder.rmtree()
        folder.mkdir()
        files = expand_paths(input_cfg.paths)
        info = _ingest_per_file(input_cfg, run, folder, files, executor, source, stage_name) \
            if executor is not None and not reads_on_driver(input_cfg) else None
        if info is None:
            from pipeline.progress import current
            if current() is not None:
                current().phase("reading the source")
            ids = IdCounter()
            parser = ChunkParser(executor, folder, run.batch_size, stage_name, input_cfg.limit) \
                if executor is not None else None
            shards, _, text_bytes = _write_shards(read_documents(input_cfg, run.batch_size, parser), folder,
                                                  run.shard_size, "", ids, source)
            info = {"shards": shards, "duplicate_ids": ids.result(), "text_bytes": text_bytes}
        info["seconds"] = round(time.perf_counter() - t0, 3)
        write_json(done, info)
    info = read_json(done)
    shards_in = [InputShard(name, folder / f"{name}.arrow", rows,
                            folder / f"{name}.aside.json" if (folder / f"{name}.aside.json").exists() else None)
                 for name, rows in info["shards"]]
    inputs = StageInputs(shards=shards_in, batch_size=run.batch_size, duplicate_ids=info["duplicate_ids"])
    inputs.ingest_seconds = info.get("seconds", 0.0)
    inputs.text_bytes = info.get("text_bytes")
    return inputs


def _ingest_per_file(input_cfg, run, folder: RunPath, files: list[Path], executor, source=None,
                     stage_name=None) -> dict | None:
    """One task per file. Files whose columns differ are read again in order by the driver,
    which conforms them to the first file's columns (or names the file that cannot be)."""
    reader = SourceReader(workers_of=stage_name)
    params = {"shard_size": run.shard_size, "input": input_cfg.model_dump(), "source": source}
    tasks = [ShardTask(folder, batch_size=run.batch_size, params={**params, "file": str(f), "index": i})
             for i, f in enumerate(files)]
    results = list(executor.map(reader.ingest_file, tasks))
    schemas = {r["schema"] for r in results if r["schema"] is not None}
    if len(schemas) > 1:
        folder.rmtree()
        folder.mkdir()
        return None
    ids = IdCounter()
    ids.hashes = [load_npy(folder / f"ids-{i:05d}.npy") for i in range(len(files))]
    for i in range(len(files)):
        (folder / f"ids-{i:05d}.npy").unlink()
    return {"shards": [s for r in results for s in r["shards"]], "duplicate_ids": ids.result(),
            "text_bytes": sum(r["text_bytes"] for r in results), "parallel_files": len(files)}
