"""One wording of the serve session's events: every event of the union has words, and the
CLI and the TUI say the same line for the same event."""

from __future__ import annotations

import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from homelab.cli.serve_cmd import ServeText
from homelab.engine.kinds import Measured, ServePlan
from homelab.engine.llamacpp.actuals import format_actuals
from homelab.engine.supervision.failure import EngineFailure
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.state_file import SetAside
from homelab.engine.supervision.states import State, Transition
from homelab.errors import EngineError
from homelab.hub.download import PullProgress
from homelab.plan.calibration_miss import Setting
from homelab.serve import events as ev
from homelab.serve.describe import Described, describe
from homelab.serve.prove import ProofResult
from homelab.ui.log_feed import transition_line
from homelab.ui.messages import ServeEvent
from homelab.ui.server_flow import ServerFlow
from homelab.ui.state import Health, Running

WAS, NOW = Setting(32, 32 * 8192, 3 << 30), Setting(16, 16 * 8192, 3 << 29)
PROOF = ProofResult(0, 8192, 8182, 2.5, "process", 100 << 20, 300 << 20, 400 << 20)
RECORD = EngineRecord(
    "llama.cpp", 4242, 4242, None, ("llama-server",), "127.0.0.1", 8081, "/m/a.gguf",
    "/tmp/a.log", 0.0, True,
)  # fmt: skip
PLAN = ServePlan("test", None, "/m/a.gguf", None)  # type: ignore[arg-type]
FAILURE = EngineFailure(
    "llama-server stopped", "llama-server was killed by SIGKILL", "something killed it",
    ("line one",), -9,
)  # fmt: skip


def _transition(state: State, reason: str, attempt: int = 1, failure=None) -> Transition:
    return Transition(state, State.STARTING, 0.0, 0.0, reason, attempt, 4242, "http://h:1", failure)


SAMPLES: dict[type, object] = {
    ev.PresetChosen: ev.PresetChosen("qwen", "Qwen 3", "Qwen/Qwen3-GGUF:Q4_K_M"),
    ev.PullProgress: ev.PullProgress(PullProgress("a.gguf", "downloading", 1, 2, 1, 2, 1)),  # type: ignore[arg-type]
    ev.Pulled: ev.Pulled("/m/a.gguf", "picked Q4_K_M"),
    ev.SetAsideNotice: ev.SetAsideNotice(SetAside(Path("/s/e.json"), Path("/s/e.bad"), "junk")),
    ev.Planned: ev.Planned(PLAN, ("llama-server",), "port 8080 is taken; using 8081"),
    ev.Adopting: ev.Adopting(RECORD, "llama-server", 75.0),
    ev.Replacing: ev.Replacing("llama-server", 4242, "/m/a.gguf", "http://h:1"),
    ev.Starting: ev.Starting("llama.cpp", "llama-server"),
    ev.Started: ev.Started(4242, Path("/tmp/a.log"), 8080, 8081),
    ev.EngineChanged: ev.EngineChanged(_transition(State.RESTARTING, "restart in 1.0 s")),
    ev.Ready: ev.Ready("http://h:1", 4242, "llama-server", "ready in 2 s"),
    ev.Actuals: ev.Actuals(Measured((), format_actuals(()), None, "no compute line")),
    ev.LeftRunning: ev.LeftRunning(Path("/tmp/a.log"), adopted=False),
    ev.Stopped: ev.Stopped("outside"),
    ev.Failed: ev.Failed(EngineError("it broke")),
    ev.GateKeyCreated: ev.GateKeyCreated("/c/gate.key", "k-123"),
    ev.GateSamplingNote: ev.GateSamplingNote("[sampling] min_p reaches only the OpenAI routes"),
    ev.GateStarted: ev.GateStarted("http://h:8080", 4096, 2, "http://h:1", False, 2048),
    ev.GateAdopted: ev.GateAdopted("http://h:8080", 2048),
    ev.GateMissing: ev.GateMissing("it was started with --no-gate"),
    ev.GateRepairing: ev.GateRepairing("http://127.0.0.1:8080"),
    ev.GateStopped: ev.GateStopped("http://h:8080"),
    ev.GateRetargeted: ev.GateRetargeted(2048, 1, 2048),
    ev.Replanning: ev.Replanning("re-plan", 4242),
    ev.Replanned: ev.Replanned("re-plan", 4242, 4343),
    ev.Proving: ev.Proving(0, 8182, 8192),
    ev.Proved: ev.Proved(PROOF),
    ev.Healing: ev.Healing("load", "failed to allocate CPU buffer", WAS, NOW, 1, 4, ("x", "-np", "16")),
    ev.Healed: ev.Healed((WAS,), NOW, True),
    ev.PromptCacheOff: ev.PromptCacheOff("failed to allocate memory for prompt cache state"),
}  # fmt: skip
"""One event of each kind of the union."""


def test_the_samples_are_the_union() -> None:
    assert set(SAMPLES) == set(typing.get_args(ev.SessionEvent))


@pytest.mark.parametrize("kind", typing.get_args(ev.SessionEvent), ids=lambda k: k.__name__)
def test_every_event_has_words(kind: type) -> None:
    said = describe(SAMPLES[kind])  # type: ignore[arg-type]
    assert isinstance(said, Described)
    assert said.line, f"{kind.__name__} says nothing"
    assert said.headline == said.line.splitlines()[0]


def test_a_plain_pull_and_a_plan_without_a_port_move_say_nothing() -> None:
    assert describe(ev.Pulled("/m/a.gguf", None)).line is None
    assert describe(ev.Planned(PLAN, (), None)).line is None


def _cli(event: ev.SessionEvent, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    text = ServeText()
    text(event)
    out = capsys.readouterr()
    return out.out.rstrip("\n"), out.err.rstrip("\n")


def _tui_note(event: ev.SessionEvent) -> tuple[str | None, list[tuple[str, str | None]]]:
    """What the server panel notes and the app notifies of ``event``."""
    told: list[tuple[str, str | None]] = []
    app = SimpleNamespace(
        state=SimpleNamespace(health=Health(), running=Running()),
        notify=lambda words, title=None: told.append((words, title)),
        _show_engine=lambda: None,
    )
    ServerFlow.on_serve_event(app, ServeEvent(event))  # type: ignore[arg-type]
    return app.state.health.note, told


@pytest.mark.parametrize("kind", [ev.Proved, ev.Healing, ev.Healed, ev.PromptCacheOff])
def test_the_panel_notes_what_the_cli_prints(kind: type, capsys) -> None:
    event = SAMPLES[kind]
    out, _ = _cli(event, capsys)  # type: ignore[arg-type]
    note, told = _tui_note(event)  # type: ignore[arg-type]
    assert note == out
    assert told == [(out.splitlines()[0], "launch")]


def test_the_gate_s_new_limits_read_the_same(capsys) -> None:
    event = SAMPLES[ev.GateRetargeted]
    out, _ = _cli(event, capsys)  # type: ignore[arg-type]
    assert out == "gate: new plan, admits 2048 tokens at once, up to 2048 per request, 1 request at once; queued requests keep their place"  # fmt: skip
    assert _tui_note(event)[1] == [(out, "gate")]  # type: ignore[arg-type]


def test_a_restart_and_the_crash_before_it_read_the_same_in_the_log(capsys) -> None:
    crashed = _transition(State.CRASHED, "llama-server stopped", failure=FAILURE)
    restarting = _transition(State.RESTARTING, "restart in 1.0 s (1 crash(es))")
    text = ServeText()
    text(ev.EngineChanged(crashed))
    text(ev.EngineChanged(restarting))
    out = capsys.readouterr()
    assert out.err.splitlines() == [
        "crashed: llama-server was killed by SIGKILL",
        "  the engine said:",
        "    line one",
        "  something killed it",
    ]
    assert out.out == "restart in 1.0 s (1 crash(es))\n"
    assert transition_line(crashed) == "── " + out.err.splitlines()[0]
    assert transition_line(restarting) == "── " + out.out.rstrip("\n")


def test_ready_again_reads_the_same_in_the_log(capsys) -> None:
    again = _transition(State.READY, "ready in 2 s", attempt=2)
    out, _ = _cli(ev.EngineChanged(again), capsys)
    assert out == "ready again: http://h:1 (pid 4242, ready in 2 s)"
    assert transition_line(again) == "── " + out
    assert transition_line(_transition(State.READY, "ready in 2 s")) == "── ready: ready in 2 s"
