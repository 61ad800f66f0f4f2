"""Helpers of the gate-in-serve tests: find this test's detached gate processes, chat."""

from __future__ import annotations

import time

import httpx
import psutil

from homelab.paths import state_dir

GATE_MODULE = "homelab.serve.gate_process"
PLAN = ["--vram", "8GiB", "--ctx", "512", "--parallel", "1"]


def gate_processes() -> list[psutil.Process]:
    """The detached gate processes that keep this test's state folder."""
    return processes_with(GATE_MODULE)


def processes_with(word: str) -> list[psutil.Process]:
    """The live processes of this test's state folder with ``word`` in their command line."""
    mine = str(state_dir())
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if word not in (process.info["cmdline"] or []):
                continue
            if process.status() == psutil.STATUS_ZOMBIE:  # ended, not yet reaped
                continue
            if process.environ().get("HOMELAB_STATE_DIR") == mine:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def kill_keeper() -> None:
    """SIGKILL the keeper of the detached serve the record names and wait until it is gone
    (what an adopting serve repairs: the keeper would restart a dead gate itself)."""
    from homelab.engine.supervision.process import alive
    from homelab.engine.supervision.state_file import StateFile

    record = StateFile().read()
    assert record is not None and record.kept and record.supervisor_pid is not None
    psutil.Process(record.supervisor_pid).kill()
    deadline = time.monotonic() + 30
    while alive(record.supervisor_pid, record.supervisor_create_time):
        assert time.monotonic() < deadline, "the keeper outlived its SIGKILL"
        time.sleep(0.05)


def wait_gates_gone(timeout_s: float = 10.0) -> bool:
    """True once no gate process of this test runs (they watch the engine record each second)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not gate_processes():
            return True
        time.sleep(0.1)
    return not gate_processes()


def chat(url: str, *, key: str | None = None) -> httpx.Response:
    """One short chat completion at ``url`` (greedy, 8 tokens)."""
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8,
            "temperature": 0,
        },
        headers=headers,
        timeout=180,  # a loaded CPU runner takes its time
        trust_env=False,
    )


def gate_state(url: str) -> dict:
    """The gate's own state (``/homelab/gate/state``: limits, queue, counts)."""
    from homelab.gate.state import STATE_PATH

    return httpx.get(f"{url}{STATE_PATH}", timeout=10, trust_env=False).json()


LONG_TOKENS = 160
"""Tokens the running request generates: long enough to be running when the engine ends."""


def long_chat(url: str) -> httpx.Response:
    """A non-streaming chat through ``url`` that generates ``LONG_TOKENS`` tokens (greedy)."""
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": LONG_TOKENS,
            "ignore_eos": True,
            "temperature": 0,
        },
        timeout=300,
        trust_env=False,
    )


def queued_stream(url: str) -> str:
    """A streaming chat (it waits at the gate behind the running one); its whole body."""
    body = {
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, timeout=300, trust_env=False
    ) as response:
        assert response.status_code == 200
        return response.read().decode()
