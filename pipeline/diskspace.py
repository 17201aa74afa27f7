"""A disk that fills up mid-stage: one line saying how much the stage had written, how much
more it needs (from its finished shards) and how much is free, and what a rerun keeps. The
stage folder stays as it was (<folder>.tmp with its finished shards' markers), so a rerun of a
per-document stage resumes from them; partial files of the shard cut short are removed."""
from __future__ import annotations

import errno
import os
import shutil

from pipeline.errors import UserError


def is_disk_full(exc: BaseException | None) -> bool:
    """ENOSPC (or a quota's EDQUOT) anywhere in the exception's chain; a Ray worker's error
    comes back as text."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MB"


def _bytes_under(folder) -> int:
    if folder.local is not None:
        return sum(f.stat().st_size for f in folder.local.rglob("*") if f.is_file())
    return sum(f.size() or 0 for f in folder.rglob())


def free_bytes(folder) -> int | None:
    """Free bytes on the disk holding `folder` (its nearest existing parent); None off the local filesystem."""
    path = folder.local
    if path is None:
        return None
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def remove_partial_files(folder) -> None:
    """The cut-short shard's files under temp names (renamed into place only once complete)."""
    if folder.local is None or not folder.local.is_dir():
        return
    for f in folder.local.rglob("*.tmp"):
        if f.is_file():
            f.unlink(missing_ok=True)


def raise_if_disk_full(exc: BaseException, label: str, output, shards_total: int | None, resumes: bool) -> None:
    """Turns a disk-full error of a stage into one line (a UserError); anything else passes."""
    if not is_disk_full(exc):
        return
    folder = output.tmp
    remove_partial_files(folder)
    written = _bytes_under(folder) if folder.exists() else 0
    done = len(output.done_shards()) if folder.exists() else 0
    free = free_bytes(folder)
    msg = f"stage '{label}': no space left on the disk of {folder}"
    msg += f" ({_mb(free)} free)" if free is not None else ""
    if shards_total:
        msg += f"; it had written {_mb(written)} for {done} of {shards_total} shards"
        if done and resumes:
            msg += f", about {_mb(written / done * (shards_total - done))} more to go"
    if resumes:
        msg += (f"; free space or move output_dir to a larger disk, then rerun the same command: the {done} "
                "finished shards are kept")
    else:
        msg += (f"; free more than the {_mb(written)} it had written (or move output_dir to a larger disk), then "
                "rerun the same command: this stage starts over")
    raise UserError(msg) from None


def disk_full_line(exc: OSError) -> str:
    """The command line's fallback, for a disk that fills up outside a stage (manifest, report)."""
    where = exc.filename or ""
    free = None
    if where:
        from pipeline.runpath import RunPath
        free = free_bytes(RunPath.of(os.path.dirname(str(where)) or "."))
    return (f"no space left on the disk of {where or 'the output folder'}"
            + (f" ({_mb(free)} free)" if free is not None else "")
            + ": free space and rerun the same command; finished stages are kept")
