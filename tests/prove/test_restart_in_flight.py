"""The supervisor's asked-for restart (``respec(spec, restart=True)``, what a heal hands over)
with a request in flight, for real. llama-server b11312 that gets one SIGTERM while a slot
works stops its loop and then waits for the in-flight HTTP request, which never gets its
answer: it exits only when the client gives up. A restart that only sent SIGTERM therefore
hung for as long as the client waited (the first run-time heal test's hang). The run loop
now stops the engine itself (SIGTERM, a second SIGTERM on which llama-server exits at once,
then SIGKILL), says RESTARTING, not CRASHED, and starts the new spec; the client's request
ends with a closed connection, not at its own timeout.

Real llama-server, real SmolLM2, a real long prompt in flight.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from homelab.engine.supervision.states import State
from tests.engine.conftest import smol_argv

pytestmark = pytest.mark.engine
CLIENT_TIMEOUT_S = 120.0
"""Far longer than a restart may take: a restart that waits for the client fails the test."""


def test_an_asked_for_restart_with_a_request_in_flight_restarts_now_and_is_no_crash(
    supervise, llama_server_bin: Path, smollm2_gguf: Path
) -> None:
    argv = smol_argv(llama_server_bin, smollm2_gguf, "-c", "2048", "-ub", "2048", "-fa", "off")
    supervisor = supervise(argv=argv)
    supervisor.start()
    first = supervisor.wait_ready(120)
    url = supervisor.url
    assert url is not None
    tokens = httpx.post(f"{url}/tokenize", json={"content": "the river keeps rising " * 40})
    prompt = (tokens.json()["tokens"] * 100)[:2000]
    ended: dict[str, object] = {}

    def long_request() -> None:
        began = time.monotonic()
        try:
            body = {"prompt": prompt, "n_predict": 2, "cache_prompt": False}
            ended["status"] = httpx.post(
                f"{url}/completion", json=body, timeout=CLIENT_TIMEOUT_S
            ).status_code
        except httpx.HTTPError as error:
            ended["error"] = type(error).__name__
        ended["seconds"] = time.monotonic() - began

    client = threading.Thread(target=long_request)
    client.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the slot is working on it
        slots = httpx.get(f"{url}/slots").json()
        if any(s.get("is_processing") for s in slots):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the long request never reached a slot")

    new = replace(supervisor.spec, argv=(*argv, "-c", "1024"))
    supervisor.respec(new, restart=True)
    client.join(CLIENT_TIMEOUT_S / 2)
    assert not client.is_alive(), "the in-flight request was still waiting: the restart hung"
    assert "error" in ended or ended.get("status") == 200, ended
    again = supervisor.wait_ready(120)
    assert again.attempt == first.attempt + 1
    states = [t.state for t in supervisor.events]
    assert State.CRASHED not in states  # asked for: no crash, nothing toward a crash loop
    restarting = [t for t in supervisor.events if t.state is State.RESTARTING]
    assert [t.reason for t in restarting] == ["restarting on the new plan"]
    assert (
        httpx.get(f"{url.rsplit(':', 1)[0]}:{again.url.rsplit(':', 1)[1]}/slots").json()[0]["n_ctx"]
        == 1024
    )  # the new spec runs
