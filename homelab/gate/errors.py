"""The gate's errors: what a person sees (HomelabError subclasses) and what a client is
answered (:class:`BadRequest`, turned into an HTTP reply by :mod:`homelab.gate.replies`)."""

from __future__ import annotations

from homelab.errors import ExitCode, HomelabError


class GateError(HomelabError):
    """The gate could not start or run."""

    title = "Gate error"
    exit_code = ExitCode.ENGINE


class GatePortInUseError(GateError):
    """The gate's port is held by another program."""

    title = "Gate port in use"


class BadRequest(Exception):
    """A malformed request: the gate answers it ``status`` itself (never sent to the engine)."""

    status = 400
    kind = "invalid_request_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
