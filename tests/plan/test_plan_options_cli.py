"""Hostile option values are usage errors (exit 2, one clear line, no traceback) on every
planning command: plan, quants, presets and serve share the plan options."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.options import plan_options
from homelab.errors import ExitCode, UsageError

NO_GPU = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "no_gpu.json"
COMMANDS = ("plan", "quants", "presets", "serve")


def _argv(command: str, model: Path, *options: str) -> list[str]:
    target = {"plan": [str(model)], "serve": [str(model)], "quants": ["tester/Any-GGUF"]}
    snapshot = ["--gpu-snapshot", str(NO_GPU), "--sample-seconds", "0"]
    return [command, *target.get(command, []), *snapshot, *options]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own usage error
        code = stop.code if isinstance(stop.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--port", "0", "argument --port: must be between 1 and 65535, not 0"),
        ("--port", "65536", "argument --port: must be between 1 and 65535, not 65536"),
        ("--port", "-1", "argument --port: must be between 1 and 65535, not -1"),
        ("--port", "８０８０", "argument --port: not a whole number"),  # fullwidth digits
        ("--gpu", "-1", "argument --gpu: must be at least 0, not -1"),
        ("--ctx", "²", "argument --ctx: not a whole number"),
        ("--parallel", "0", "argument --parallel: must be at least 1, not 0"),
    ],
)
def test_bad_numbers_are_usage_errors(
    capsys, smollm2_gguf: Path, command: str, option: str, value: str, words: str
) -> None:
    code, err = _run(capsys, _argv(command, smollm2_gguf, option, value))
    assert code == ExitCode.USAGE
    assert words in err and "Traceback" not in err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--workload", "²", "unknown workload '²'"),
        ("--workload", "1" * 40, "unknown workload"),
        ("--vram", "9" * 320, "not a size"),
        ("--vram", "9" * 20, "is not one homelab plans for"),
        ("--vram", "0", "is not one homelab plans for"),
    ],
)
def test_bad_workload_and_vram_are_usage_errors(
    capsys, smollm2_gguf: Path, command: str, option: str, value: str, words: str
) -> None:
    code, err = _run(capsys, _argv(command, smollm2_gguf, option, value))
    assert code == ExitCode.USAGE
    assert err.startswith("homelab: Invalid usage: ") and words in err
    assert "Traceback" not in err
    assert len(err) < 400  # a 320-digit value is not echoed whole


@pytest.mark.parametrize(
    "fields",
    [
        {"vram": 10**300},
        {"vram": 0},
        {"vram": True},
        {"gpu": -1},
        {"port": 0},
        {"port": 65536},
        {"port": True},
        {"ctx": 2.5},
        {"slots": 0},
        {"engine": "ollama"},
    ],
)
def test_plan_options_refuse_them_without_a_front_end(fields: dict) -> None:
    """The TUI builds PlanOptions from widgets: the domain refuses the same values, by setting."""
    with pytest.raises(UsageError) as caught:
        plan_options(**fields)
    assert "--" not in caught.value.message
