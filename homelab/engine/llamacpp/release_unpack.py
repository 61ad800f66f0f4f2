"""Unpack one llama.cpp release archive into a folder, refusing any member that would leave it.

llama.cpp packs each release archive with GNU tar's ``--transform``, so every member sits
under one top folder (``llama-b11312/llama-server``, ``cudart-llama-...-x64/libcudart.so.13``)
and shared libraries may come with relative symlinks beside them. Unpacking strips that top
folder. The whole member list is checked before anything is written: an absolute name, a
``..`` part, a member outside the top folder, a device or pipe, or a link pointing out of the
folder refuses the archive. tarfile's ``"data"`` filter then extracts what was checked (it
refuses the same escapes once more, and drops set-uid bits and group/other write bits).
"""

from __future__ import annotations

import gzip
import posixpath
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from homelab.engine.llamacpp.release_fetch import BUILD_INSTEAD
from homelab.errors import EngineError


class _Unsafe(Exception):
    """A member that may not be unpacked: ``args == (member name, why)``."""


def unpack(archive: Path, dest: Path) -> None:
    """Extract ``archive``'s members, less their top folder, into ``dest`` (which exists).

    Raises:
        EngineError: the archive is unreadable, or one of its members would escape ``dest``
            (then nothing of it is written).
        OSError: writing failed (a full disk...).
    """
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            top = _top_folder(members)
            for member in members:
                _check(member, top)
            tar.extractall(dest, members=members, filter=_strip)
    except _Unsafe as unsafe:
        name, why = unsafe.args
        raise _unsafe_error(archive, name, why) from None
    except tarfile.FilterError as refused:  # the data filter saw what the checks did not
        name = refused.tarinfo.name
        raise _unsafe_error(archive, name, str(refused)) from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as problem:
        raise EngineError(
            f"{archive.name} is not a readable tar archive ({problem})",
            hint=f"delete {archive} and run it again; {BUILD_INSTEAD}",
            title="Not a llama.cpp release",
        ) from None


def _unsafe_error(archive: Path, name: str, why: str) -> EngineError:
    """The error for an archive with a member that would land outside the engine folder."""
    return EngineError(
        f"{archive.name} holds {name!r}, which {why}; nothing was installed",
        hint="llama.cpp does not pack its releases like this, so this file is not one of "
        f"them: delete {archive}; {BUILD_INSTEAD}",
        title="Unsafe release archive",
    )


def _top_folder(members: list[tarfile.TarInfo]) -> str:
    """The first part of the first member's name: the folder every member must lie under."""
    for member in members:
        parts = PurePosixPath(member.name).parts
        if parts and parts[0] not in ("/", ".."):
            return parts[0]
        raise _Unsafe(member.name, "is not inside a top folder")
    raise _Unsafe("(nothing)", "is all the archive holds: it is empty")


def _check(member: tarfile.TarInfo, top: str) -> None:
    """Raise :class:`_Unsafe` unless ``member`` stays inside ``top`` once unpacked."""
    path = PurePosixPath(member.name)
    if member.name.startswith("/") or path.is_absolute():
        raise _Unsafe(member.name, "has an absolute path")
    if ".." in path.parts:
        raise _Unsafe(member.name, "climbs out of its folder with '..'")
    if not path.parts or path.parts[0] != top:
        raise _Unsafe(member.name, f"lies outside the archive's top folder {top}/")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise _Unsafe(member.name, "is neither a file, a folder nor a link")
    if len(path.parts) == 1 and not member.isdir():
        raise _Unsafe(member.name, "stands where the top folder should be")
    if member.issym():
        if member.linkname.startswith("/"):
            raise _Unsafe(member.name, f"links to the absolute path {member.linkname}")
        lands = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), member.linkname))
        if not lands.startswith(top + "/"):
            raise _Unsafe(member.name, f"links out of its folder (to {member.linkname})")
    if member.islnk():
        target = PurePosixPath(member.linkname)
        if target.is_absolute() or ".." in target.parts or target.parts[:1] != (top,):
            raise _Unsafe(member.name, f"is a hard link to {member.linkname}, outside its folder")


def _strip(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """``member`` without its top folder (which :func:`_check` made sure of), through the
    ``"data"`` filter; None for the top folder itself."""
    parts = PurePosixPath(member.name).parts[1:]
    if not parts:
        return None
    stripped = member.replace(name="/".join(parts), deep=False)
    if member.islnk():
        link_parts = PurePosixPath(member.linkname).parts[1:]
        stripped = stripped.replace(linkname="/".join(link_parts), deep=False)
    return tarfile.data_filter(stripped, dest)
