"""The server panel's log feed on a real supervisor: seeded, then pushed, every line once.

The feed is started while the real llama-server is booting (lines are being read as it
subscribes and seeds), so the seam between the seed (the tail) and the pushed lines is
exercised for real: the lines it gathers must be the log file's, each once, in order.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from homelab.engine.llamacpp.diagnose import llama_server_profile
from homelab.engine.supervision.supervisor import EngineSpec, Supervisor
from homelab.ui.log_feed import LogArrived, LogFeed
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine

WAIT_S = 120.0


def test_a_feed_started_mid_boot_holds_every_line_of_the_log_once_in_order(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path, engine_pids
) -> None:
    argv = (str(llama_server_bin), "-m", str(smollm2_gguf), "-c", "512", "-np", "1", "-lv", "4")
    spec = EngineSpec(argv=argv, model=str(smollm2_gguf), port=free_port(), start_timeout_s=WAIT_S)
    supervisor = Supervisor(spec, llama_server_profile(), state_file=None, log_dir=tmp_path)
    posted: list[object] = []
    supervisor.start()
    engine_pids.add(supervisor.pid)
    try:
        deadline = time.monotonic() + WAIT_S
        while len(supervisor.tail(3)) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)  # a few lines read: the feed joins a log being written
        feed = LogFeed(supervisor, posted.append, keep=5000).start()
        supervisor.wait_ready(WAIT_S)
    finally:
        supervisor.stop()  # delivers what is queued, then ends the subscription
    lines = feed.take()
    assert supervisor.log_path is not None
    written = supervisor.log_path.read_text(errors="replace").splitlines()
    engine_lines = [line for line in lines if not line.startswith("── ")]
    assert engine_lines == written  # the marker (from the seed) and every line, once
    transitions = [line for line in lines if line.startswith("── ")]
    assert transitions[-2:] == ["── stopping: stop requested", "── stopped: stopped"]
    # one message until the app takes: a burst of lines is one wake-up, not one per line
    assert len(posted) == 1 and isinstance(posted[0], LogArrived) and posted[0].feed is feed
    assert feed.take() == []
    feed.close()
    feed.close()  # idempotent


def test_a_feed_started_before_the_first_attempt_still_begins_with_its_marker(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path, engine_pids
) -> None:
    """The app may subscribe before the supervisor's thread has begun the first attempt
    (no log yet, so an empty seed); the marker line is never pushed, so the first pushed
    line seeds the feed from the tail instead (a loaded CI machine lost the marker)."""
    argv = (str(llama_server_bin), "-m", str(smollm2_gguf), "-c", "512", "-np", "1")
    spec = EngineSpec(argv=argv, model=str(smollm2_gguf), port=free_port(), start_timeout_s=WAIT_S)
    supervisor = Supervisor(spec, llama_server_profile(), state_file=None, log_dir=tmp_path)
    posted: list[object] = []
    assert supervisor.tail(5) == []  # nothing begun: the seed is empty
    feed = LogFeed(supervisor, posted.append, keep=5000).start()
    supervisor.start()
    engine_pids.add(supervisor.pid)
    try:
        supervisor.wait_ready(WAIT_S)
    finally:
        supervisor.stop()
    lines = [line for line in feed.take() if not line.startswith("── ")]
    assert supervisor.log_path is not None
    assert lines == supervisor.log_path.read_text(errors="replace").splitlines()
    assert lines[0].startswith("---- homelab ")
    feed.close()
