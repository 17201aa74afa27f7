"""Content-addressed caches of per-document results, so a rerun only does a stage's expensive
work (a redaction) for documents it has not seen with the same configuration.

Layout: `<root>/cache/<kind>/<namespace>/<digest>.arrow`. The root is the run folder, or the
run config's `cache.folder`. A namespace is a digest of everything besides the document that
the results depend on (package version, code digest, stage options, engine and model versions,
a key's id): the stage's `dependencies().cache_namespace`. A key within it is the xxh3-128 digest of the
document's text (and of whatever else of the document the result depends on).
`cache/<kind>/<namespace>` is the namespace's cache key: a stage records the ones it used in its
stats.json (`cache_keys`), which is how `python -m pipeline cache --prune` tells used
namespaces from stale ones.

Entry files are written whole, once, at deterministic names (the digest of their keys), as
object stores have no append or rename: Arrow IPC files with a `key` column
(fixed_size_binary(16)) and the kind's value columns. A worker reads the keys of a namespace's
files once (keys only), then the values of the rows it needs.

Bounded: before writing, a worker checks the cache root's size (measured once per worker, plus
what it wrote since) against `cache.max_mb`; over it, the entry is not written (counted as
`entries_not_written`). Workers check independently, so the bound can be passed by at most one
batch per worker. `max_mb: 0` turns writing off. `--prune` removes namespaces no finished stage
lists, then the oldest entry files while the cache is still over max_mb.
"""
from __future__ import annotations

import io
import logging
from collections import OrderedDict

import numpy as np
import pyarrow as pa

from pipeline.runpath import RunPath

log = logging.getLogger("medprep")


def arrow_file_bytes(table: pa.Table) -> bytes:
    """A table as one zstd-compressed Arrow IPC file (a cache entry: a quarter of the space)."""
    buf = io.BytesIO()
    with pa.ipc.new_file(buf, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return buf.getvalue()


def read_arrow_file(path: RunPath, options: pa.ipc.IpcReadOptions | None = None) -> pa.Table | None:
    """A cache entry file's table, or None where it cannot be read (logged; the caller
    computes the entry again)."""
    try:
        with path.open_input() as fh:
            return pa.ipc.open_file(fh, options=options).read_all()
    except (OSError, pa.ArrowInvalid) as exc:
        log.warning("cache: skipping an unreadable entry file %s (%s)", path, type(exc).__name__)
        return None


CACHE_DIR = "cache"
KEY = pa.field("key", pa.binary(16))
# Decoded entry files a worker keeps (a batch's hits mostly come from a few files).
OPEN_FILES = 8


def cache_root(config) -> RunPath:
    """The folder holding `cache/`: the run folder, or the config's cache.folder."""
    direct = config.run.commit == "direct"
    folder = config.run.cache.folder
    return RunPath.of(folder, direct=direct) if folder else config.output_dir


def run_cache(config, namespace: str | None) -> dict:
    """What a stage needs of the cache, for its RunContext (plain values: it travels to workers);
    `namespace`: the stage's (`dependencies().cache_namespace`), None for a stage that caches nothing."""
    root = cache_root(config)
    out = {"root": str(root), "direct": root.direct, "max_mb": config.run.cache.max_mb}
    if namespace:
        out["namespace"] = namespace
    return out


class DerivedCache:
    """Folders for what a stage derives from inputs a rerun may leave unchanged (a benchmark's
    n-gram set, the reference tokenizers' figures): `cache/<kind>/<key>/` in the cache root,
    key a digest of everything the data depends on. `keys` are the cache keys handed out, for
    the stage's stats (`cache_keys`), so `--prune` keeps them; `writes` is False when
    cache.max_mb is 0. Files in them are written whole (RunPath.write_bytes), the one that
    marks the entry complete last."""

    def __init__(self, ctx_cache: dict, kind: str):
        self.root = RunPath.of(ctx_cache["root"], direct=ctx_cache.get("direct", False))
        self.kind = kind
        self.writes = ctx_cache.get("max_mb", 1) != 0
        self.keys: list[str] = []

    @classmethod
    def of(cls, ctx_cache: dict | None, kind: str) -> "DerivedCache | None":
        """The stage's cache of `kind` (ctx.cache), or None where the run gives it no cache root."""
        return cls(ctx_cache, kind) if ctx_cache and ctx_cache.get("root") else None

    def folder(self, key: str) -> RunPath:
        name = f"{CACHE_DIR}/{self.kind}/{key}"
        if name not in self.keys:
            self.keys.append(name)
        return self.root / CACHE_DIR / self.kind / key


def document_keys(texts: list[str], extra: list | None = None) -> list[bytes]:
    """xxh3-128 of each text (and of its `extra` value, where the result depends on one)."""
    import xxhash
    if extra is None:
        return [xxhash.xxh3_128_digest(t.encode("utf-8")) for t in texts]
    return [xxhash.xxh3_128_digest(t.encode("utf-8") + b"\x00" +
                                   (b"\x01" if e is None else b"\x02" + str(e).encode("utf-8")))
            for t, e in zip(texts, extra)]


class DocumentCache:
    """One namespace of one kind: `get` the cached values of keys, `put` new ones."""

    def __init__(self, ctx_cache: dict, kind: str, namespace: str, value_fields: list[pa.Field]):
        self.root = RunPath.of(ctx_cache["root"], direct=bool(ctx_cache.get("direct")))
        self.key = f"{CACHE_DIR}/{kind}/{namespace}"
        self.folder = self.root / self.key
        self.max_bytes = int(ctx_cache.get("max_mb", 0)) << 20
        self.schema = pa.schema([KEY, *value_fields])
        self.names = [f.name for f in value_fields]
        self._files: list[RunPath] | None = None
        self._keys = None            # sorted keys (numpy S16) of the namespace's entry files
        self._where = None           # (file number, row) of each sorted key
        self._open: OrderedDict = OrderedDict()
        self._used: int | None = None

    # -- lookups --
    def _load_index(self) -> None:
        files, keys, where = [], [], []
        options = pa.ipc.IpcReadOptions(included_fields=[0])
        for path in self.folder.glob("*.arrow"):
            table = read_arrow_file(path, options)
            if table is None:
                continue
            col = table.column(0).combine_chunks()
            if col.type != KEY.type or col.null_count:
                continue
            buf = col.buffers()[1]
            keys.append(np.frombuffer(buf, dtype="S16", count=len(col), offset=col.offset * 16))
            where.append(np.stack([np.full(len(col), len(files), np.int64), np.arange(len(col), dtype=np.int64)], 1))
            files.append(path)
        all_keys = np.concatenate(keys) if keys else np.empty(0, "S16")
        order = np.argsort(all_keys, kind="stable")
        self._files = files
        self._keys = all_keys[order]
        self._where = (np.concatenate(where) if where else np.empty((0, 2), np.int64))[order]

    def _lookup(self, keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(indexes of the keys that have an entry, their positions in the sorted index)."""
        if self._keys is None:
            self._load_index()
        if not len(self._keys) or not keys:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        wanted = np.array(keys, dtype="S16")
        pos = np.minimum(np.searchsorted(self._keys, wanted), len(self._keys) - 1)
        found = np.flatnonzero(self._keys[pos] == wanted)
        return found, pos[found]

    def has(self, keys: list[bytes]) -> np.ndarray:
        """Whether each key has an entry (the index only: no values are read)."""
        out = np.zeros(len(keys), bool)
        out[self._lookup(keys)[0]] = True
        return out

    def get(self, keys: list[bytes]) -> list[dict | None]:
        """The cached values (a dict of the value columns) of each key, or None."""
        out: list[dict | None] = [None] * len(keys)
        for i, at in zip(*self._lookup(keys)):
            file_no, row = self._where[at]
            values = self._values(int(file_no))
            if values is not None:
                out[i] = {name: values[name][row] for name in self.names}
        return out

    def _values(self, file_no: int) -> dict | None:
        if file_no in self._open:
            self._open.move_to_end(file_no)
            return self._open[file_no]
        table = read_arrow_file(self._files[file_no])
        try:
            values = None if table is None else {name: table[name].to_pylist() for name in self.names}
        except KeyError:
            log.warning("cache: skipping an entry file without the expected columns %s", self._files[file_no])
            values = None
        self._open[file_no] = values
        if len(self._open) > OPEN_FILES:
            self._open.popitem(last=False)
        return values

    # -- writes --
    def used_bytes(self) -> int:
        if self._used is None:
            # Another worker's temporary file (NAME.PID.tmp) may be renamed between the listing
            # and its size: gone, it counts nothing (its final name is counted from the next listing).
            self._used = sum(f.size() or 0 for f in (self.root / CACHE_DIR).rglob())
        return self._used

    def put(self, keys: list[bytes], columns: dict[str, pa.Array]) -> bool:
        """Write new entries as one file; False where the cache is full (nothing written)."""
        if not keys:
            return True
        table = pa.table([pa.array(keys, KEY.type), *(columns[n] for n in self.names)], schema=self.schema)
        data = arrow_file_bytes(table)
        if self.used_bytes() + len(data) > self.max_bytes:
            return False
        import xxhash
        (self.folder / f"{xxhash.xxh3_128_hexdigest(b''.join(keys))}.arrow").write_bytes(data)
        self._used += len(data)
        return True


# ---- python -m pipeline cache -------------------------------------------------------------

def namespaces(root: RunPath) -> dict[str, list[RunPath]]:
    """The cache's files by folder relative to the root (`cache/<kind>/<namespace>`,
    `cache/scores/<stage>/<fingerprint>`): each folder that holds files is one cache key."""
    out: dict[str, list[RunPath]] = {}
    for f in (root / CACHE_DIR).rglob():
        out.setdefault(f.parent.relative_to(root), []).append(f)
    return out


def keys_in_use(run_dir: RunPath) -> set[str]:
    """Cache keys the finished stages of the run folder list in their stats.json."""
    from pipeline.runpath import read_json
    used: set[str] = set()
    for stats in (run_dir / "stages").glob("*/stats.json"):
        try:
            used.update(str(k).strip("/") for k in read_json(stats).get("cache_keys") or [])
        except (OSError, ValueError, AttributeError):
            continue
    return used


def _in_use(key: str, used: set[str]) -> bool:
    return any(key == u or key.startswith(u + "/") for u in used)


def describe(config) -> list[dict]:
    root = cache_root(config)
    used = keys_in_use(config.output_dir)
    return [{"key": key, "files": len(files), "bytes": sum(f.size() or 0 for f in files), "in_use": _in_use(key, used)}
            for key, files in sorted(namespaces(root).items())]


def prune(config) -> list[str]:
    """Remove the cache keys no finished stage of the run lists in its stats.json, then, while
    the cache is over max_mb, the oldest entry files of the others. A line per removal.
    Only this run's stages are asked: a cache.folder shared by several runs is pruned to
    what the run of this config uses."""
    root = cache_root(config)
    used = keys_in_use(config.output_dir)
    removed = []
    left: list[tuple[float, int, RunPath]] = []
    for key, files in sorted(namespaces(root).items()):
        if not _in_use(key, used):
            size = sum(f.size() or 0 for f in files)
            for f in files:
                f.unlink(missing_ok=True)
            if not (root / key).rglob():
                (root / key).rmtree()
            removed.append(f"{key}: not used by a finished stage ({len(files)} files, {size} bytes)")
            continue
        for f in files:
            info = f.info()
            left.append((info.mtime.timestamp() if info.mtime else 0.0, info.size, f))
    limit = config.run.cache.max_mb << 20
    total = sum(size for _, size, _ in left)
    for _, size, f in sorted(left, key=lambda t: (t[0], t[2].path)):
        if total <= limit:
            break
        f.unlink(missing_ok=True)
        total -= size
        removed.append(f"{f.relative_to(root)}: oldest entries while the cache is over cache.max_mb ({size} bytes)")
    return removed
