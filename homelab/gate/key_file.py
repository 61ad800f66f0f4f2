"""The gate's API key on disk: ``state_dir()/gate.key``, readable by its owner alone (0600).

A gate that binds anything but loopback checks a key on every route. The key is made
once (:func:`secrets.token_urlsafe`), written with mode 0600 (created that way, never
widened by the umask, never rewritten), and reused by every later gate; the serve that
made it says it once. It is never written into the engine record.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from homelab.errors import UsageError
from homelab.paths import state_dir

KEY_NAME = "gate.key"
KEY_BYTES = 32
"""Random bytes in a new key (43 URL-safe characters)."""
MAX_KEY_CHARS = 4096


def key_path() -> Path:
    """Where the key lives."""
    return state_dir() / KEY_NAME


def load_or_create_key(path: Path | None = None) -> tuple[str, bool]:
    """The key in ``path`` (default :func:`key_path`), made first when there is none.

    Returns:
        (the key, True when it was made just now).

    Raises:
        UsageError: the file is not a regular file, others may read or write it, or it
            holds no key.
    """
    path = path or key_path()
    key = stored_key(path)
    if key is not None:
        return key, False
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # another homelab made it a moment ago: use that one
        return _read_key(path), False
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (key + "\n").encode("ascii"))
        os.fsync(fd)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    os.close(fd)
    return key, True


def stored_key(path: Path | None = None) -> str | None:
    """The key stored in ``path`` (default :func:`key_path`); None when there is no key
    file (the gate then checks none). The one reader of the key: the gate, ``status`` and
    ``homelab agent`` all read it so.

    Raises:
        UsageError: it is not a private (0600) regular file holding one key.
    """
    try:
        return _read_key(path or key_path())
    except FileNotFoundError:
        return None


def _read_key(path: Path) -> str:
    """The key stored in ``path``.

    Raises:
        FileNotFoundError: there is no key file.
        UsageError: it is not a private regular file holding one key.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _bad(path, "it is not a regular file")
        if info.st_mode & 0o077:
            raise UsageError(
                f"the gate's API key file {path} may be read by others "
                f"(mode {stat.S_IMODE(info.st_mode):04o})",
                hint=f"make it private (chmod 600 {path}) or remove it to get a new key",
                title="Gate key not private",
            )
        raw = os.read(fd, MAX_KEY_CHARS + 1)
    finally:
        os.close(fd)
    try:
        key = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise _bad(path, "it is not ASCII text") from None
    if not key or len(raw) > MAX_KEY_CHARS or any(c.isspace() for c in key):
        raise _bad(path, "it does not hold one key")
    return key


def _bad(path: Path, why: str) -> UsageError:
    return UsageError(
        f"the gate's API key file {path} cannot be used: {why}",
        hint=f"remove {path}: the next serve makes a new key",
        title="Bad gate key file",
    )
