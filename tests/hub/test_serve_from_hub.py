"""`homelab serve REPO:QUANT` and `homelab serve PRESET`: pulled from the (stand-in) Hub when
needed, then served by the real llama-server; `homelab stop` ends it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from tests.engine.supervisor_child import run_homelab
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine
PLAN = ["--vram", "8GiB", "--ctx", "512", "--parallel", "1"]


@pytest.fixture
def tiny_repo(hub_stub, tiny_gguf) -> str:
    repo = "tester/Tiny-GGUF"
    hub_stub({repo: {"Tiny-F16.gguf": tiny_gguf("Tiny-F16.gguf", n_layer=2)}})
    return repo


def _serve_then_stop(*args: str) -> subprocess.CompletedProcess[str]:
    served = run_homelab("serve", *args, *PLAN, "--port", str(free_port()), "--detach")
    record = StateFile().read()
    try:
        assert served.returncode == 0, served.stdout + served.stderr
        assert record is not None and alive(record.pid)
        assert "ready: http://127.0.0.1:" in served.stdout
    finally:
        stopped = run_homelab("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert record is not None and not alive(record.pid)
    return served


def test_serve_a_hub_reference_pulls_then_serves(tiny_repo: str, hf_cache: Path) -> None:
    served = _serve_then_stop(f"{tiny_repo}:F16")
    cached = list(hf_cache.glob("models--tester--Tiny-GGUF/snapshots/*/Tiny-F16.gguf"))
    assert len(cached) == 1
    assert str(cached[0]) in served.stdout  # llama-server was given the cached file (-m PATH)
    again = run_homelab("pull", f"{tiny_repo}:F16", "--offline")
    assert again.returncode == 0 and again.stdout.strip() == str(cached[0])


def test_serve_a_user_preset(tiny_repo: str, hf_cache: Path) -> None:
    from homelab.paths import config_dir

    presets = config_dir() / "presets"
    presets.mkdir(parents=True, exist_ok=True)
    (presets / "tiny.toml").write_text(
        'name = "Tiny"\nrepo = "tester/Tiny-GGUF"\nquant = "F16"\nengine = "llama.cpp"\n'
        'workload = "chat"\nnotes = "a test model"\nlicense = "mit"\n'
    )
    served = _serve_then_stop("tiny")
    assert "preset tiny: Tiny (tester/Tiny-GGUF:F16)" in served.stdout
    assert "Slots for chat" in served.stdout  # the preset's workload hint was used
    assert "--alias tiny " in served.stdout  # served by the preset's own name


def test_unknown_preset_is_a_usage_error() -> None:
    result = run_homelab("serve", "no-such-preset", *PLAN)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "no-such-preset" in result.stderr


def test_serve_dry_run_of_a_preset_plans_it_with_its_workload(tiny_repo: str) -> None:
    """``serve PRESET --dry-run`` plans what serve would (the preset's repo and quant, planned
    for its workload hint) from the header alone: nothing pulled, nothing started."""
    import json

    from homelab.paths import config_dir

    presets = config_dir() / "presets"
    presets.mkdir(parents=True, exist_ok=True)
    (presets / "tiny.toml").write_text(
        'name = "Tiny"\nrepo = "tester/Tiny-GGUF"\nquant = "F16"\nengine = "llama.cpp"\n'
        'workload = "chat"\nnotes = "a test model"\nlicense = "mit"\n'
    )
    dry = run_homelab("serve", "tiny", "--vram", "8GiB", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    chat = run_homelab("plan", f"{tiny_repo}:F16", "--vram", "8GiB", "--workload", "chat", "--json")
    agent = run_homelab("plan", f"{tiny_repo}:F16", "--vram", "8GiB", "--json")
    planned, as_repo = json.loads(dry.stdout), json.loads(chat.stdout)
    alias = planned["argv"].index("--alias") + 1
    assert planned["argv"][alias] == "tiny"  # served by the preset's own name
    assert as_repo["argv"][alias] != "tiny"  # the repo planned by itself: its GGUF's name
    as_repo["argv"][alias] = "tiny"
    assert planned == as_repo != json.loads(agent.stdout)  # nothing else differs
    assert "-hf" in planned["argv"]  # not pulled: llama-server's own fetch
    assert StateFile().read() is None
