"""The words for a serve session's events, for every front-end: a line (or a few) and how it
reads.

:func:`describe` is a ``match`` over :data:`~homelab.serve.events.SessionEvent` ending in
``assert_never``: an event added to the union without words here is a type error. Which
events a front-end shows, and what else it does on one (a widget, a progress bar, an exit
code), stays in the front-end; only the words are here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import assert_never

from homelab.engine.kinds import KINDS
from homelab.engine.supervision.states import State, Transition
from homelab.serve import events as ev
from homelab.units import format_bytes


class Severity(Enum):
    """How a line reads: news, a success, something to notice, a failure."""

    INFO = "info"
    OK = "ok"
    WARN = "warn"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Described:
    """An event's words: one line or a few (newline-joined); None when there is nothing to
    say (a pull without a note)."""

    line: str | None
    severity: Severity = Severity.INFO

    @property
    def headline(self) -> str | None:
        """The first line (what a one-line view, such as the TUI's log, shows)."""
        return None if self.line is None else self.line.split("\n", 1)[0]


_INFO, _OK, _WARN, _ERROR = Severity.INFO, Severity.OK, Severity.WARN, Severity.ERROR


def describe(event: ev.SessionEvent) -> Described:
    """The words for ``event`` (see the module docstring)."""
    match event:
        case ev.PresetChosen(key, name, ref):
            return Described(f"preset {key}: {name} ({ref})")
        case ev.PullProgress(p):
            done, total = format_bytes(p.done), format_bytes(p.total)
            return Described(f"pulling {p.filename}: {done} of {total}")
        case ev.Pulled(_, note):
            return Described(note)
        case ev.SetAsideNotice(set_aside):
            return Described(f"homelab: {set_aside.describe()}", _WARN)
        case ev.Planned(_, _, port_note):
            return Described(port_note)
        case ev.Adopting(record, program, age_s):
            kind = "detached " if record.detached else ""
            up = f"pid {record.pid}, up {duration(age_s)}"
            return Described(f"adopting the running {kind}{program} ({up}) serving {record.model}")
        case ev.Replacing(program, pid, model, url):
            what, where = f" ({model})" if model else " (no record)", f" at {url}" if url else ""
            return Described(f"replacing {program} pid {pid}{what}{where}", _WARN)
        case ev.Starting(kind, program):
            cost = KINDS[kind].start_cost if kind in KINDS else None
            return Described(f"starting {program}{f' ({cost})' if cost else ''}...")
        case ev.Started(pid, log_path, wanted, port):
            said = f"pid {pid}, log {log_path}"
            moved = f"port {wanted} was taken meanwhile; using port {port} instead\n"
            return Described(said if port == wanted else moved + said)
        case ev.EngineChanged(transition):
            return _transition(transition)
        case ev.Ready(url, pid, program, reason):
            return Described(f"ready: {url} ({program} pid {pid}; {reason})", _OK)
        case ev.Actuals():
            return _actuals(event)
        case ev.LeftRunning(log_path, adopted):
            if adopted:
                return Described("left the detached engine running; `homelab stop` stops it")
            return Described(f"left running (detached); `homelab stop` stops it; log: {log_path}")
        case ev.Stopped(how):
            return STOPPED.get(how, Described("stopped"))
        case ev.Failed(error):
            return Described(error.message, _ERROR)
        case ev.GateKeyCreated(path, key):
            said = f"made the gate's API key (shown this once; it stays in {path})"
            return Described(f"{said}: {key}")
        case ev.GateSamplingNote(message):
            return Described(message, _WARN)
        case ev.GateStarted(url, budget, max_concurrent, engine_url, _, ceiling):
            limits = gate_limits(budget, ceiling, max_concurrent)
            said = f"gate: {url} in front of the engine at {engine_url}"
            return Described(f"{said}\n  {limits}; clients use {url}", _OK)
        case ev.GateAdopted(url, ceiling):
            return Described(f"adopting its gate: {url} ({gate_limits(None, ceiling, None)})")
        case ev.GateMissing(reason):
            said = f"no gate: the running engine has none ({reason}); --replace restarts it"
            return Described(f"{said} behind the gate", _WARN)
        case ev.GateRepairing(url):
            return Described(f"its gate at {url} is gone: starting it again there", _WARN)
        case ev.GateStopped(url):
            return Described(f"stopped the gate at {url}")
        case ev.GateRetargeted(budget, max_concurrent, ceiling):
            limits = gate_limits(budget, ceiling, max_concurrent)
            return Described(f"gate: new plan, {limits}; queued requests keep their place")
        case ev.Replanning(why, pid):
            return Described(f"{why}: the engine (pid {pid}) restarts under the same gate")
        case ev.Replanned(why, old_pid, pid):
            return Described(f"{why}: pid {old_pid} → {pid}, behind the same gate", _OK)
        case ev.Proving(slot, tokens, ctx):
            said = f"slot {slot} filled with {tokens:,} of its {ctx:,} tokens"
            return Described(f"proving the plan: {said}...")
        case ev.Proved():
            return _proved(event)
        case ev.Healing():
            return _healing(event)
        case ev.Healed():
            return _healed(event)
        case ev.PromptCacheOff(said):
            off = "the engine's prompt cache ran out of memory and is off"
            return Described(f"{off} (it serves on without it; nothing restarts): {said}", _WARN)
        case _:
            assert_never(event)


STOPPED = {
    "outside": Described("the engine was stopped from outside (`homelab stop` or `--replace`)"),
    "failed": Described("stopped: it failed", _ERROR),
    "released": Described("released: the engine runs on without this session"),
}
"""The words for each way a session ends but "stopped" (as asked)."""


def gate_limits(budget: int | None, ceiling: int | None, max_concurrent: int | None) -> str:
    """``admits 2048 tokens at once, up to 2048 per request, 1 request at once``."""
    words = []
    if budget:
        words.append(f"admits {budget} tokens at once")
    if ceiling:
        words.append(f"up to {ceiling} per request")
    if max_concurrent:
        words.append(f"{max_concurrent} request{'s' if max_concurrent != 1 else ''} at once")
    return ", ".join(words) or "limits from the engine once it says"


def duration(seconds: float) -> str:
    """``1h02m``, ``3m05s``, ``42s``: how long an engine has been up."""
    hours, rest = divmod(max(int(seconds), 0), 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )


def _transition(transition: Transition) -> Described:
    """A supervisor transition: a crash with its explained failure, a restart's reason,
    readiness after a restart with its URL; the state and its reason otherwise."""
    state, failure, reason = transition.state, transition.failure, transition.reason
    if state is State.CRASHED:
        said = reason if failure is None else failure.describe()
        hint = f"\n  {failure.hint}" if failure is not None and failure.hint else ""
        return Described(f"crashed: {said}{hint}", _ERROR)
    if state is State.RESTARTING:
        return Described(reason, _WARN)
    if state is State.READY and transition.attempt > 1:
        return Described(f"ready again: {transition.url} (pid {transition.pid}, {reason})", _OK)
    return Described(f"{state.value}: {reason}", _INFO if failure is None else _ERROR)


def _actuals(event: ev.Actuals) -> Described:
    m = event.measured
    if m.recorded_compute is None:
        said = f"calibration not recorded: {m.not_recorded}"
    else:
        said = f"recorded the measured compute buffer ({format_bytes(m.recorded_compute)}) "
        said += "for the next plan of these flags"
    return Described(f"predicted vs actual (from the engine's load log):\n{m.table}\n{said}")


def _proved(event: ev.Proved) -> Described:
    r = event.result
    where = "the card's used memory" if r.memory_source == "card" else "the engine's RSS"
    peak = f"{format_bytes(r.before_bytes)} → peak {format_bytes(r.peak_bytes)}"
    seen = f"{where} {peak} (plan: {format_bytes(r.predicted_bytes)})"
    if r.ok:
        return Described(f"proved in {r.seconds:.1f} s: {r.prompt_tokens:,} tokens; {seen}", _OK)
    return Described(
        f"the proof failed after {r.seconds:.1f} s: {r.oom or r.error}; {seen}", _ERROR
    )


def _healing(event: ev.Healing) -> Described:
    steps = f"{event.step}/{event.max_steps}: {event.was.describe()} → {event.now.describe()}"
    said = f"out of memory ({event.stage}): {event.said}\n  healing {steps}"
    argv = "\n  " + " ".join(event.argv) if event.argv else ""
    return Described(f"{said}; restarting on the smaller plan{argv}", _WARN)


def _healed(event: ev.Healed) -> Described:
    failed = ", ".join(s.describe() for s in event.failed)
    said = f"healed: {event.worked.describe()} holds ({failed} ran out of memory)"
    kept = "recorded the miss in the calibration store: the next plan starts there"
    kept = kept if event.recorded else f"the miss was not recorded: {event.not_recorded}"
    return Described(f"{said}\n{kept}", _OK)
