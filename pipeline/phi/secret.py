"""The PHI key: the secret behind document-id pseudonyms (and surrogates).

Sources, first found wins: the environment variable MEDPREP_PHI_KEY (hex or text), the file a
config names (`phi.key_file`), else a default key file outside any run folder
(`$XDG_CONFIG_HOME/medprep/phi.key`, or `~/.config/medprep/phi.key`), created with 32 random
bytes and mode 0600 the first time it is needed. The key itself never goes into logs, stats,
the manifest or the run folder; only where it came from (`phi_key_source`) may be recorded."""
from __future__ import annotations

import hashlib
import os
import secrets
import string
from pathlib import Path

from pipeline.errors import UserError

ENV = "MEDPREP_PHI_KEY"
KEY_BYTES = 32


def default_key_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "medprep" / "phi.key"


def _parse(data: bytes) -> bytes:
    """Hex text is decoded; other text is used as its UTF-8 bytes (without surrounding
    whitespace); anything else (the 32 random bytes of a generated file) is used as is."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return data
    if text and len(text) % 2 == 0 and all(c in string.hexdigits for c in text):
        return bytes.fromhex(text)
    return text.encode("utf-8")


def _create_default(path: Path) -> None:
    """32 random bytes at `path`, mode 0600, created atomically: concurrent workers that
    both find the file missing end up with the same key (the first link wins)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def load_phi_key(key_path: str | None) -> bytes:
    """The key as bytes (see the module docstring for the order of sources)."""
    env = os.environ.get(ENV)
    if env is not None:
        key = _parse(env.encode("utf-8"))
        if not key:
            raise UserError(f"{ENV} is set but empty")
        return key
    if key_path:
        path = Path(key_path)
        if not path.is_file():
            raise UserError(f"phi.key_file: key file not found: {path}")
    else:
        path = default_key_file()
        if not path.exists():
            _create_default(path)
    key = _parse(path.read_bytes())
    if not key:
        raise UserError(f"{path}: the PHI key file is empty")
    return key


def phi_key_source(key_path: str | None) -> str:
    """Where load_phi_key takes the key from, for the manifest (never the key)."""
    if os.environ.get(ENV) is not None:
        return f"env:{ENV}"
    if key_path:
        return f"file:{Path(key_path).resolve()}"
    return f"default:{default_key_file()}"


def key_id(key: bytes) -> str:
    """A short one-way name for a key, so a changed key changes the phi stage's fingerprint."""
    return hashlib.blake2b(b"medprep key id", key=hashlib.sha256(key).digest(), digest_size=8).hexdigest()
