"""Why an engine stopped, for a person: what happened, the engine's own words, the next step.

Engine-specific readers (``homelab.engine.llamacpp.diagnose`` for llama-server)
turn a log and an exit code into an :class:`EngineFailure`; the supervisor
keeps it on the transition that reported it and, when it gives up, raises
:meth:`EngineFailure.to_error` (the right exit code: a model that does not fit
exits 3, a bad model file 4, anything else 6).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, replace

from homelab.errors import EngineError, HomelabError

QUOTE_LINES = 6
"""How many of the engine's own lines a failure quotes."""


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """One engine failure, explained."""

    title: str
    """A few words ("KV cache did not fit")."""
    message: str
    """What happened, with the values involved."""
    hint: str | None
    """The next step, when there is one."""
    quoted: tuple[str, ...] = ()
    """The engine's own error lines (or its last lines when it printed no error)."""
    returncode: int | None = None
    """Exit code (negative: killed by that signal); None when unknown (an adopted engine)."""
    kind: str | None = None
    """Engine-specific failure kind, e.g. ``unknown_architecture``; None when unrecognised."""
    permanent: bool = False
    """The same argv on the same file would fail the same way (no point restarting)."""
    port_conflict: bool = False
    """The engine could not bind its port (another program took it first)."""
    error_type: type[HomelabError] = EngineError
    """The HomelabError subclass :meth:`to_error` raises (it sets the exit code)."""

    def with_prefix(self, text: str) -> EngineFailure:
        """The same failure with ``text`` before its message (e.g. "gave up after 5 crashes: ")."""
        return replace(self, message=f"{text}{self.message}")

    def describe(self) -> str:
        """Message plus the quoted engine lines, as printed."""
        if not self.quoted:
            return self.message
        quoted = "\n".join(f"    {line}" for line in self.quoted)
        return f"{self.message}\n  the engine said:\n{quoted}"

    def to_error(self) -> HomelabError:
        """The HomelabError to raise for this failure."""
        return self.error_type(self.describe(), hint=self.hint, title=self.title)


def describe_exit(returncode: int | None) -> str:
    """ "exited with code 1", "was killed by SIGKILL", or "exited" when unknown."""
    if returncode is None:
        return "exited"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def unexplained(engine: str, returncode: int | None, last_lines: Sequence[str]) -> EngineFailure:
    """A failure the engine's log does not explain: the exit and its last lines."""
    hint = None
    if returncode == -signal.SIGKILL:
        hint = "something killed it with SIGKILL (the kernel's out-of-memory killer, or a person)"
    return EngineFailure(
        title=f"{engine} stopped",
        message=f"{engine} {describe_exit(returncode)}",
        hint=hint,
        quoted=tuple(last_lines[-QUOTE_LINES:]),
        returncode=returncode,
    )


def start_timeout(
    engine: str, timeout_s: float, last_lines: Sequence[str], log_path: str
) -> EngineFailure:
    """The engine neither became ready nor exited within ``timeout_s``."""
    return EngineFailure(
        title="Engine start timed out",
        message=f"{engine} did not become ready within {timeout_s:g} s (stopped it)",
        hint=f"a big model on a slow disk can take longer: `start_timeout` {int(timeout_s * 2)}; "
        f"the whole log is {log_path}",
        quoted=tuple(last_lines[-QUOTE_LINES * 2 :]),
        kind="start_timeout",
    )
