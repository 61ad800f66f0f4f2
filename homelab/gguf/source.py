"""Where GGUF bytes come from, and the buffered cursor the reader walks them with.

A ``ByteSource`` answers "give me ``length`` bytes at ``offset``". A local file is one;
an HTTP range-request source would be another, where every ``read`` is a
round trip. So the reader never asks a source for small pieces: it reads through a
``ByteCursor``, which fetches growing chunks (64 KiB first) and takes size hints from
the reader ("about 2 MB of vocabulary strings are still to come"), so a header is
fetched in a handful of reads and little beyond its end. The cursor counts what it
fetched (``ReadStats``) so tests and benchmarks can hold it to that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, Self, runtime_checkable

from homelab.errors import ModelFileError
from homelab.files import NotRegularFileError, open_regular
from homelab.units import KiB, MiB


@runtime_checkable
class ByteSource(Protocol):
    """Random access to the bytes of one file, local or remote."""

    name: str
    """Path or URL, for messages."""

    def size(self) -> int | None:
        """Total bytes, or ``None`` when the source cannot tell."""
        ...

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset``; fewer (maybe none) only at the end of the file."""
        ...


class BytesSource:
    """A source over bytes already in memory (tests, or a header fetched elsewhere)."""

    def __init__(self, data: bytes, name: str = "<memory>") -> None:
        self._data = bytes(data)
        self.name = name

    def size(self) -> int | None:
        return len(self._data)

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"bad read: offset {offset}, length {length}")
        return self._data[offset : offset + length]


class LocalFileSource:
    """A file on disk, opened on first use; use it as a context manager to close it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = str(path)
        self._file: BinaryIO | None = None
        self._size: int | None = None

    def _open(self) -> BinaryIO:
        """Open the file, translating the reasons it cannot be opened into plain words.

        Raises:
            ModelFileError: the path does not exist, is a directory, a FIFO or a device
                (refused before reading, which could block or never end), is not
                readable by this user, or the OS refused to open it for another reason.
        """
        if self._file is not None:
            return self._file
        name = self.name
        try:
            handle = open_regular(self.path)
        except FileNotFoundError:
            raise ModelFileError(
                f"{name}: no such file", hint="Check the path, or download the model first."
            ) from None
        except NotRegularFileError as error:
            raise ModelFileError(f"{name} is {error.kind}, not a GGUF file") from None
        except PermissionError:
            if self.path.is_dir():  # Windows reports a directory as "permission denied"
                raise ModelFileError(f"{name} is a directory, not a GGUF file") from None
            raise ModelFileError(
                f"{name}: permission denied", hint="The file is not readable by this user."
            ) from None
        except OSError as exc:
            raise ModelFileError(f"cannot open {name}: {exc.strerror or exc}") from None
        info = os.fstat(handle.fileno())
        self._size = info.st_size
        self._file = handle
        return handle

    def size(self) -> int | None:
        self._open()
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``offset``.

        Raises:
            ModelFileError: the OS reported an I/O error (a failing disk, a network
                share that went away).
        """
        handle = self._open()
        if self._size is not None:
            length = min(length, self._size - offset)
        if length <= 0:
            return b""
        try:
            handle.seek(offset)
            data = handle.read(length) or b""
            while 0 < len(data) < length:  # a short read before EOF: keep going
                more = handle.read(length - len(data))
                if not more:
                    break
                data += more
        except OSError as exc:
            raise ModelFileError(
                f"reading {self.name} at offset {offset} failed: {exc.strerror or exc}"
            ) from None
        return data

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class ReadStats:
    """What one parse asked of its source."""

    bytes_read: int
    """Bytes the source returned, in total."""
    reads: int
    """Number of ``read`` calls (round trips, for a remote source)."""


FIRST_CHUNK = 64 * KiB
MAX_CHUNK = 64 * MiB


class ByteCursor:
    """A read position over a source, with one buffer that is refilled in growing chunks.

    The reader looks at ``buf`` directly (``struct.unpack_from(buf, pos - buf_start)``)
    after asking :meth:`fill` for the bytes it needs. ``pos`` may move past the buffer
    (:meth:`skip` over array data nobody needs); the skipped bytes are then never fetched.

    Chunk sizes: a read asks for what is needed, but at least ``FIRST_CHUNK``. The reader's
    latest ``expect`` hint says where it expects to stop reading soon; a read goes up to
    there, so a header is fetched in a few reads ending near its end. Past the hinted end
    (the hint was short) a read grows with what was read so far (half of it), so even
    without hints a header of N bytes costs O(log N) reads.
    """

    __slots__ = (
        "_ends_before",
        "_expect_end",
        "buf",
        "buf_start",
        "bytes_read",
        "name",
        "pos",
        "reads",
        "size",
        "source",
        "what",
    )

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.name = source.name
        self.size = source.size()
        self.buf = b""
        self.buf_start = 0
        self.pos = 0
        self.what = "the header"
        """What the reader is reading now, for the truncation message."""
        self.bytes_read = 0
        self.reads = 0
        self._expect_end = 0
        self._ends_before = 0

    @property
    def stats(self) -> ReadStats:
        return ReadStats(self.bytes_read, self.reads)

    def fill(self, need: int, expect: int = 0) -> int:
        """Make ``need`` bytes from ``pos`` available in ``buf``; return ``pos``'s index in it.

        ``expect`` is the reader's estimate of how many bytes from ``pos`` it will go on
        to read soon (0: keep the previous estimate); it sizes this and later fetches.

        Raises:
            ModelFileError: the source ends before ``pos + need``.
        """
        if expect:
            self._expect_end = self.pos + expect
        off = self.pos - self.buf_start
        if len(self.buf) - off >= need:
            return off
        return self._fetch(need)

    def _fetch(self, need: int) -> int:
        size = self.size
        if size is not None and self.pos + need > size:
            raise self.truncated(need)
        off = self.pos - self.buf_start
        have = len(self.buf) - off
        if have > 0:
            keep = self.buf[off:]
            start = self.buf_start + len(self.buf)
        else:
            keep, have, start = b"", 0, self.pos
        chunk = self._expect_end - start if self._expect_end > start else self.bytes_read // 2
        length = max(need - have, min(max(chunk, FIRST_CHUNK), MAX_CHUNK))
        if size is not None:
            length = min(length, size - start)
        data = self.source.read(start, length)
        self.reads += 1
        self.bytes_read += len(data)
        if data and len(data) < length:  # a short read happens only at the end of the file
            self.size = start + len(data)
        known_until = self.buf_start + len(self.buf)
        self.buf = keep + data if keep else data
        self.buf_start = self.pos
        if len(self.buf) < need:  # the source just told us where it ends
            if data or start <= known_until:
                self.size = start + len(data)
            else:  # nothing at all at ``start`` (after a skip): it ends somewhere before
                self._ends_before = start
            raise self.truncated(need)
        return 0

    def skip(self, n: int) -> None:
        """Move ``n`` bytes on without fetching them (unless they are buffered already).

        When the source's size is unknown, the last skipped byte is fetched (with what
        follows it, which the reader needs next anyway) to prove that the bytes exist.

        Raises:
            ModelFileError: the source ends before the new position.
        """
        if self.size is not None or n <= 0:
            if self.size is not None and self.pos + n > self.size:
                raise self.truncated(n)
            self.pos += n
            return
        start = self.pos
        self.pos += n - 1
        try:
            self.fill(1)
        except ModelFileError:
            self.pos = start
            raise self.truncated(n) from None
        self.pos += 1

    def truncated(self, need: int) -> ModelFileError:
        """The error for "the file ends before the bytes the reader needs"."""
        if self.size is not None:
            end = f"the file ends at byte {self.size}"
        else:
            end = f"the file ends before byte {self._ends_before}"
        return ModelFileError(
            f"{self.name} is truncated: {self.what} at offset {self.pos} needs bytes up to "
            f"{self.pos + need}, but {end}",
            hint="The file may be an incomplete download; fetch it again.",
        )
