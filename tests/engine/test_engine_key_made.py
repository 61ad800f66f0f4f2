"""The engine's own key (issue 22): what homelab makes, what it accepts back from a record,
and reading the key an engine was given back from its environment (owner only), never a
stranger's.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from homelab.engine.engine_key import is_engine_key, key_headers, new_engine_key
from homelab.engine.supervision.identity import ENGINE_VAR, STATE_VAR, key_given


def test_a_new_key_is_fresh_and_one_llama_server_reads_whole() -> None:
    keys = {new_engine_key() for _ in range(50)}
    assert len(keys) == 50  # fresh each time
    for key in keys:
        assert is_engine_key(key) and "," not in key and len(key) >= 40
    assert key_headers(None) == {}
    assert key_headers("k" * 20) == {"Authorization": "Bearer " + "k" * 20}


@pytest.mark.parametrize(
    "value",
    [
        None,
        12,
        "",
        "short",
        "two keys," + "x" * 20,
        "with space " + "x" * 20,
        "é" * 20,
        "\x00" * 20,
    ],
)
def test_values_homelab_never_makes_are_not_keys(value: object) -> None:
    assert not is_engine_key(value)


@pytest.fixture
def marked() -> Iterator[tuple[int, str]]:
    """A process carrying an engine marker and a key in its environment."""
    key = new_engine_key()
    env = {ENGINE_VAR: "engine-1", STATE_VAR: "/nowhere/engine.json", "LLAMA_API_KEY": key}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env=env, stdin=subprocess.DEVNULL
    )
    try:
        yield proc.pid, key
    finally:
        proc.kill()
        proc.wait()


def test_the_key_is_read_back_from_the_engine_it_was_given_to(marked) -> None:
    pid, key = marked
    assert key_given(pid, "engine-1", "LLAMA_API_KEY") == key
    assert key_given(pid, "engine-2", "LLAMA_API_KEY") is None  # not that engine (pid reuse)
    assert key_given(pid, None, "LLAMA_API_KEY") is None  # a record without a marker
    assert key_given(pid, "engine-1", "VLLM_API_KEY") is None  # not given that one
    assert key_given(2**22 + 12345, "engine-1", "LLAMA_API_KEY") is None  # no such process
