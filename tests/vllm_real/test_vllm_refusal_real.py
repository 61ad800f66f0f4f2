"""The seed's refusal for real: a max-model-len whose KV does not fit a small pool.

homelab refuses it before booting, naming a largest max-model-len; forced, the real vLLM
0.32 boots, refuses the same with its own ValueError, and homelab turns that log line into
the very same message. The number is vLLM's: it is read off vLLM's line, never written here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vllm_real_helpers import homelab, kill_tree, vllm_pids

from homelab.errors import ExitCode
from tests.factory.vllm_log import parse_vllm_log

ARGS = ("--engine", "vllm", "--ctx", "131072", "--kv-cache-memory", "256MiB", "--no-gate")


def _said(output: str) -> list[str]:
    """homelab's error as printed: the ``homelab: title: message`` line and its hint."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("homelab: "))
    return [line.strip() for line in lines[start : start + 2]]


@pytest.fixture(scope="module")
def forced(module_env, tiny_llama: Path):
    """The same request, forced past homelab's pricing: vLLM boots and refuses."""
    try:
        done = homelab(
            module_env,
            "serve",
            str(tiny_llama),
            *ARGS,
            "--force",
            "--start-timeout",
            "1400",
            timeout=1500,
        )
        yield done
    finally:
        kill_tree(vllm_pids(tiny_llama))


def test_homelab_refuses_before_booting(module_env, tiny_llama: Path) -> None:
    done = homelab(module_env, "serve", str(tiny_llama), *ARGS)
    assert done.returncode == ExitCode.DOES_NOT_FIT, done.stderr
    assert "vLLM refuses a max-model-len of 131,072 tokens" in done.stderr
    assert vllm_pids(tiny_llama) == []  # nothing was started


def test_vllm_refuses_the_same_and_homelab_says_the_same(
    module_env, tiny_llama: Path, forced
) -> None:
    before = homelab(module_env, "serve", str(tiny_llama), *ARGS)
    assert forced.returncode == ExitCode.DOES_NOT_FIT, forced.stdout[-2000:] + forced.stderr[-2000:]
    logs = [
        p.read_text(errors="replace")
        for p in Path(module_env["HOMELAB_STATE_DIR"]).rglob("*.log")
        if "ValueError" in p.read_text(errors="replace")
    ]
    assert len(logs) == 1, "vLLM's log with its refusal"
    failure = parse_vllm_log(logs[0]).failure
    assert failure is not None and failure.kind == "kv_too_small"
    assert failure.max_model_len == 131072
    vllm_says = re.search(r"estimated maximum model length is (\d+)", failure.line)
    assert vllm_says is not None
    number = vllm_says.group(1)
    preboot = _said(before.stderr)
    assert f"maximum model length is {number}." in preboot[0]  # vLLM's own number, before boot
    assert (
        f"{failure.needed_gib} GiB" in preboot[0] and f"{failure.available_gib} GiB" in preboot[0]
    )
    # the log line, turned into the same message and hint (vLLM's line quoted between them)
    # (the supervisor says why it does not restart between the title and the message)
    title, message = preboot[0].removeprefix("homelab: ").split(": ", 1)
    said = _said(forced.stderr)[0]
    assert said.startswith(f"homelab: {title}: ") and said.endswith(message)
    after = [line.strip() for line in forced.stderr.splitlines()]
    assert preboot[1] in after
    assert any(line == failure.line for line in after)
