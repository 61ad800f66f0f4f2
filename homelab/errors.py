"""One error family for everything homelab tells a person.

Every error carries a short ``title`` (what went wrong, in a few words), a
``message`` (what happened, with the values involved) and an optional ``hint``
(the next step). The CLI prints these and exits with the class's ``exit_code``;
the TUI shows them in a dialog. Third-party exceptions are translated into one of
these at the boundary of the module that calls the library.
"""

from __future__ import annotations

import errno
from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes that scripts can rely on (the CLI contract)."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    DOES_NOT_FIT = 3
    BAD_MODEL = 4
    GPU_PROBE_FAILED = 5
    ENGINE = 6
    WORKER = 7
    AGENT_CONTRACT = 8
    """The server fails an agent's contract (``homelab agent --check``): no tool calls, a
    route it speaks missing or broken."""


class HomelabError(Exception):
    """Base of every error homelab reports to a person."""

    title = "homelab error"
    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None, title: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if title is not None:
            self.title = title

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message}\n{self.hint}"


class UsageError(HomelabError):
    """The command line asked for something that cannot be done as written."""

    title = "Invalid usage"
    exit_code = ExitCode.USAGE


class ModelFileError(HomelabError):
    """A model file is missing, truncated, foreign or of an unknown kind."""

    title = "Bad model file"
    exit_code = ExitCode.BAD_MODEL


class UnknownArchitectureError(ModelFileError):
    """The GGUF names an architecture whose memory layout homelab does not know."""

    title = "Unknown architecture"


class GpuProbeError(HomelabError):
    """NVML could not tell us about the card (driver missing, no permission, ...)."""

    title = "GPU probe failed"
    exit_code = ExitCode.GPU_PROBE_FAILED


class DoesNotFitError(HomelabError):
    """The model, or the asked-for context, does not fit the memory there is."""

    title = "Does not fit"
    exit_code = ExitCode.DOES_NOT_FIT

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        title: str | None = None,
        short_by: int | None = None,
    ) -> None:
        super().__init__(message, hint=hint, title=title)
        self.short_by = short_by
        """Bytes missing for the least that would run; None when the planner cannot say."""


class EngineError(HomelabError):
    """Building, finding or running the inference engine failed."""

    title = "Engine error"
    exit_code = ExitCode.ENGINE


class AlreadyServed(HomelabError):
    """The model asked for is served already, kept by homelab's keeper: not a failure (exit 0);
    the message says where (a front-end prints it as news, not as an error)."""

    title = "Already served"
    exit_code = ExitCode.OK

    def __init__(self, message: str, *, url: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.url = url


class WorkerError(HomelabError):
    """An RPC worker (``homelab worker``, llama.cpp's rpc-server) did not answer as one."""

    title = "RPC worker not answering"
    exit_code = ExitCode.WORKER


class FileSystemError(HomelabError):
    """A file or folder homelab needs could not be read or written: a folder of its own that
    is a file, one owned by another user, a full disk. Made by :func:`file_system_error`."""

    title = "Cannot use a file or folder"


_OS_HINTS = {
    errno.EEXIST: "A folder homelab keeps things in is a file: move the file away, or point "
    "HOMELAB_STATE_DIR / HOMELAB_CONFIG_DIR / HOMELAB_DATA_DIR / HOMELAB_CACHE_DIR elsewhere.",
    errno.ENOTDIR: "A folder on that path is a file: move the file away, or point the "
    "HOMELAB_*_DIR variables elsewhere.",
    errno.EACCES: "Permission denied: run homelab as the folder's owner, or point the "
    "HOMELAB_*_DIR variables at folders you own.",
    errno.EPERM: "Not permitted: run homelab as the folder's owner, or point the "
    "HOMELAB_*_DIR variables at folders you own.",
    errno.ENOSPC: "The disk is full: free some space and try again (nothing was lost).",
    errno.EROFS: "The file system is read-only: point the HOMELAB_*_DIR variables elsewhere.",
}


def file_system_error(error: OSError) -> FileSystemError:
    """An ``OSError`` from the file system, said for a person (the path, what went wrong,
    what to do) rather than as a traceback."""
    where = f"{error.filename}: " if error.filename is not None else ""
    what = error.strerror or str(error)
    return FileSystemError(f"{where}{what}", hint=_OS_HINTS.get(error.errno or 0))
