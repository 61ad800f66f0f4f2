"""One real llama-server with SmolLM2 for the bench tests of a module (2 slots of 1,024
tokens, ``--metrics``), started and stopped by the engine tests' plain helpers; and the
engine tests' ``engines`` / the gate tests' ``gates`` (nothing left running)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.conftest import engines  # noqa: F401  (the fixture, shared)
from tests.engine.live_server import serve
from tests.gate_serve.conftest import gates  # noqa: F401  (the fixture, shared)

SERVER = ["-c", "2048", "-np", "2", "--metrics", "-ngl", "0", "-t", "2"]


@pytest.fixture(scope="module")
def engine_url(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    yield from serve(
        llama_server_bin, smollm2_gguf, tmp_path_factory.mktemp("bench-engine"), SERVER
    )
