"""The run folder through `pyarrow.fs`: a local folder, or a shared filesystem or object store
named by URI (`s3://bucket/run`, `gs://...`, `hdfs://...`; `file:///abs/path` is local).

`RunPath` is a small pathlib look-alike (`/`, name, stem, parent, exists, glob, read_text,
...) over a `pyarrow.fs.FileSystem`, so the store, stages and runner do their file work the
same way wherever the run folder is. Every read and write of the run folder goes through it.

Object stores have no rename. `renames` says whether this one does (the local filesystem);
where it does not, files are written at their final keys, whose names are deterministic, and a
shard's marker and a stage's `_SUCCESS` are written after the files they vouch for (shards.py).
Run config `commit: direct` asks for that behaviour on a local folder too (tests use it).
"""
from __future__ import annotations

import fnmatch
import io
import json
import os
import posixpath
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs


def _split_uri(location: str) -> tuple[pafs.FileSystem, str]:
    if "://" in location:
        fs, path = pafs.FileSystem.from_uri(location)
        return fs, path.rstrip("/") or "/"
    return pafs.LocalFileSystem(), os.path.abspath(location)


class RunPath:
    """A file or folder in the run folder's filesystem."""

    __slots__ = ("fs", "path", "scheme", "direct")

    def __init__(self, fs: pafs.FileSystem, path: str, scheme: str = "", direct: bool = False):
        self.fs = fs
        self.path = path
        # The URI prefix for str() (s3://, gs://); "" for a local path.
        self.scheme = scheme
        # Write at final names even where rename works (commit: direct).
        self.direct = direct

    @classmethod
    def of(cls, location, direct: bool = False) -> "RunPath":
        if isinstance(location, RunPath):
            return location._with(location.path, True) if direct and not location.direct else location
        location = str(location)
        fs, path = _split_uri(location)
        scheme = "" if fs.type_name == "local" else location.split("://", 1)[0] + "://"
        return cls(fs, path, scheme, direct)

    def _with(self, path: str, direct: bool | None = None) -> "RunPath":
        return RunPath(self.fs, path, self.scheme, self.direct if direct is None else direct)

    # -- pure path operations --
    def __truediv__(self, other) -> "RunPath":
        return self._with(posixpath.join(self.path, str(other)))

    def __str__(self) -> str:
        return self.scheme + self.path

    def __repr__(self) -> str:
        return f"RunPath({str(self)!r})"

    def __fspath__(self) -> str:
        if self.local is None:
            raise TypeError(f"{self} is not on the local filesystem")
        return self.path

    def __eq__(self, other) -> bool:
        return isinstance(other, RunPath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: "RunPath") -> bool:
        return self.path < other.path

    def __reduce__(self):
        return (_rebuild, (str(self), self.direct))

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def stem(self) -> str:
        name = self.name
        return name.rsplit(".", 1)[0] if "." in name[1:] else name

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.path)[1]

    @property
    def parent(self) -> "RunPath":
        return self._with(posixpath.dirname(self.path))

    def with_name(self, name: str) -> "RunPath":
        return self.parent / name

    def relative_to(self, other: "RunPath") -> str:
        return posixpath.relpath(self.path, other.path)

    @property
    def local(self) -> Path | None:
        """The local path, where the filesystem is the local one (mmap, hard links)."""
        return Path(self.path) if self.fs.type_name == "local" else None

    @property
    def renames(self) -> bool:
        """Whether files may be written under a temp name and renamed into place."""
        return self.fs.type_name == "local" and not self.direct

    # -- queries --
    def info(self) -> pafs.FileInfo:
        """The file system's answer for this path (type, size, mtime), one call."""
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        return self.info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self.info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        return self.info().type == pafs.FileType.Directory

    def size(self) -> int:
        return self.info().size

    def iterdir(self) -> list["RunPath"]:
        sel = pafs.FileSelector(self.path, recursive=False, allow_not_found=True)
        return sorted(self._with(i.path) for i in self.fs.get_file_info(sel))

    def glob(self, pattern: str) -> list["RunPath"]:
        """Entries matching a one-level pattern ("*.arrow"), or "dir/*/file" patterns."""
        parts = pattern.split("/")
        found = [self]
        for part in parts:
            found = [c for f in found for c in f.iterdir() if fnmatch.fnmatchcase(c.name, part)]
        return sorted(found)

    def rglob(self, pattern: str = "*") -> list["RunPath"]:
        """Files below this folder (recursively) whose name matches `pattern`."""
        sel = pafs.FileSelector(self.path, recursive=True, allow_not_found=True)
        return sorted(self._with(i.path) for i in self.fs.get_file_info(sel)
                      if i.type == pafs.FileType.File and fnmatch.fnmatchcase(posixpath.basename(i.path), pattern))

    # -- reads --
    def open_input(self):
        """A random-access file (IPC file readers, ranges)."""
        return self.fs.open_input_file(self.path)

    def open_stream(self):
        return self.fs.open_input_stream(self.path)

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    # -- writes --
    def mkdir(self, parents: bool = True, exist_ok: bool = True) -> None:
        try:
            self.fs.create_dir(self.path, recursive=True)
        except OSError as exc:
            raise _plain(exc, self) from None

    def open_output(self):
        """A write stream at this name (parents created where folders exist)."""
        try:
            if self.fs.type_name == "local":
                self.fs.create_dir(posixpath.dirname(self.path), recursive=True)
            return self.fs.open_output_stream(self.path)
        except OSError as exc:
            raise _plain(exc, self) from None

    def write_bytes(self, data: bytes) -> None:
        """Whole-file write: a temp name renamed into place where renames exist, else at the
        final key (an object store's put is atomic)."""
        # The temp name is per process: two workers may write the same content-addressed file.
        target = self.with_name(f"{self.name}.{os.getpid()}.tmp") if self.renames else self
        with target.open_output() as f:
            f.write(data)
        if target is not self:
            target.rename(self)

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def rename(self, target: "RunPath") -> None:
        if not self.renames:
            raise RuntimeError(f"{self}: no renames on this filesystem (commit: direct)")
        self.fs.move(self.path, target.path)

    def copy_to(self, target: "RunPath") -> None:
        target.parent.mkdir()
        self.fs.copy_file(self.path, target.path)

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rmtree(self) -> None:
        """Remove a folder and everything in it (or a file); nothing if it does not exist."""
        info = self.info()
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(self.path)
        elif info.type != pafs.FileType.NotFound:
            self.fs.delete_file(self.path)


def _plain(exc: OSError, path: RunPath) -> OSError:
    """pyarrow's OSError as the os module raises it: errno, its short text, the path."""
    if exc.errno:
        return type(exc)(exc.errno, os.strerror(exc.errno), str(path))
    return exc


def _rebuild(location: str, direct: bool) -> RunPath:
    return RunPath.of(location, direct)


def as_run_path(location, direct: bool | None = None) -> RunPath:
    if isinstance(location, RunPath) and direct is None:
        return location
    return RunPath.of(location, bool(direct))


# ---- whole-file helpers ----

def write_json(path: RunPath, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def read_json(path) -> object:
    return json.loads(as_run_path(path).read_text())


def save_npy(path: RunPath, array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    path.write_bytes(buf.getvalue())


def load_npy(path: RunPath, mmap: bool = False) -> np.ndarray:
    """An .npy file; memory-mapped where the file is local and `mmap` asks for it."""
    if mmap and path.local is not None:
        return np.load(path.local, mmap_mode="r", allow_pickle=False)
    return np.load(io.BytesIO(path.read_bytes()), allow_pickle=False)


def ipc_stream_reader(path: RunPath) -> pa.ipc.RecordBatchStreamReader:
    return pa.ipc.open_stream(path.open_stream())
