"""Open a file a person named, refusing what is not a regular file, and read it bounded.

Opening a FIFO for reading blocks until someone writes to it, and ``/dev/zero`` never
ends: a path typed by a person (a model, a GPU snapshot, a preset) is opened without
blocking, checked to be a regular file, and only then read, and a text file is read
up to a limit. The errors here are ``OSError`` subclasses with the plain reason; each
caller turns them into its own ``HomelabError`` (a bad model file, a bad snapshot, ...).

A state file homelab writes itself (a bench result, a measurement) is replaced whole and
atomically (:func:`replace_json`), so a crash mid-write never leaves half a file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO


class NotRegularFileError(OSError):
    """The path is a directory, a FIFO, a device or a socket, not a file to read."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"is {kind}, not a regular file", str(path))
        self.kind = kind


class FileTooLargeError(OSError):
    """The file is larger than the caller reads."""

    def __init__(self, path: str | os.PathLike[str], limit: int) -> None:
        super().__init__(errno.EFBIG, f"is larger than {limit:,} bytes", str(path))
        self.limit = limit


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, for a message: ``"a FIFO (named pipe)"``, ``"a directory"``."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    for test, kind in kinds:
        if test(mode):
            return kind
    return "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for reading (unbuffered, binary) if it is a regular file.

    The open itself does not block (``O_NONBLOCK``: a FIFO with no writer would), and
    the check is on the opened file, so nothing can be swapped in between.

    Raises:
        NotRegularFileError: a directory, FIFO, device or socket.
        OSError: the OS refused to open it (missing, permission, name too long, ...).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise NotRegularFileError(path, "a directory") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, file_kind(mode))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return open(fd, "rb", buffering=0, closefd=True)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """All bytes of the regular file ``path``, which must not exceed ``limit`` bytes.

    Raises:
        NotRegularFileError: see :func:`open_regular`.
        FileTooLargeError: the file holds more than ``limit`` bytes.
        OSError: it cannot be opened or read.
    """
    with open_regular(path) as handle:
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = handle.read(left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        raise FileTooLargeError(Path(path), limit)
    return data


def replace_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically: a temporary file in the same
    folder (created with it), then a rename. Raises ``OSError`` as the OS does."""
    import tempfile  # only to write (start-up time)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class TomlTextError(ValueError):
    """A file read whole is not UTF-8 TOML; its text is the reason, for the caller's error."""


def read_toml(path: str | os.PathLike[str], limit: int, kind: str) -> dict[str, Any]:
    """The TOML table of a small file a person wrote (a preset, a models list), read bounded
    as :func:`read_regular` reads; ``kind`` names it in the reason (``"a preset"``).

    Raises:
        OSError: as :func:`read_regular` (missing, not a regular file, too large).
        TomlTextError: not UTF-8 text, not valid TOML, or nested too deep for the parser.
    """
    import tomllib

    raw = read_regular(path, limit)
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        bad = raw[error.start : error.start + 4]
        raise TomlTextError(
            f"not {kind}: byte {error.start:,} is not UTF-8 text ({bad!r}); "
            f"{kind} is a TOML text file"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise TomlTextError(f"not valid TOML: {error}") from None
    except RecursionError:
        raise TomlTextError("not valid TOML: values nested too deep") from None
