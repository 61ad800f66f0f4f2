"""Following the engine's log file: whole lines only, in order, bounded; attempts kept apart."""

from __future__ import annotations

import threading
from pathlib import Path

from homelab.engine.llamacpp.diagnose import SERVING_LINE
from homelab.engine.supervision.attempt_log import LOGS_KEPT, AttemptLog, marker_line, new_log_path
from homelab.engine.supervision.log_tail import MAX_LINE_CHARS, LogFollower


def test_follower_dispatches_whole_lines_in_order(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    got: list[str] = []
    follower = LogFollower(log, on_line=got.append, tail_lines=3)
    assert follower.drain() == 0  # no file yet
    log.write_bytes(b"one\ntwo\nthr")
    assert follower.drain() == 2 and got == ["one", "two"]
    with log.open("ab") as handle:
        handle.write(b"ee\r\nfour\n" + b"x" * (MAX_LINE_CHARS + 10) + b"\n")
    follower.drain()
    assert got[2:4] == ["three", "four"] and len(got[4]) == MAX_LINE_CHARS
    assert follower.tail() == ["three", "four", got[4]] and follower.tail(1) == [got[4]]
    log.write_bytes(b"new\n")  # truncated and rewritten: read from the start again
    follower.drain()
    assert got[-1] == "new"


def test_follower_started_near_the_end_skips_the_cut_line(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"a" * 100 + b"\nlast complete\n")
    got: list[str] = []
    LogFollower(log, on_line=got.append, start_offset=-20).drain()
    assert got == ["last complete"]
    got.clear()
    LogFollower(log, on_line=got.append, start_offset=None).drain()  # from the end: nothing old
    assert got == []


def test_follower_thread_sees_appended_lines(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("")
    seen = threading.Event()
    follower = LogFollower(log, on_line=lambda line: seen.set() if line == "ping" else None).start()
    try:
        with log.open("a") as handle:
            handle.write("ping\n")
        assert seen.wait(10)
    finally:
        follower.stop()


def test_attempts_are_kept_apart(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    fired: list[int] = []
    attempts = AttemptLog(
        log, lambda line: SERVING_LINE.search(line) is not None, lambda: fired.append(1)
    )
    with log.open("a") as handle:
        handle.write(marker_line(1, ["llama-server", "-m", "a b.gguf"]) + "\n")
        handle.write("0.00.1 I srv  llama_server: listening on http://127.0.0.1:8080\n")
    attempts.begin(
        2
    )  # the supervisor already moved on: attempt 1's serving line is not attempt 2's
    assert attempts.lines() == [] and not attempts.serving() and fired == []
    with log.open("a") as handle:
        handle.write(marker_line(2, ["llama-server"]) + "\n")
        handle.write("E error loading model\n")
    assert attempts.lines() == ["E error loading model"] and not attempts.serving()
    with log.open("a") as handle:
        handle.write("I llama_server: listening on http://127.0.0.1:8081\n")
    attempts.lines()
    assert attempts.serving() and fired == [1]
    assert "'a b.gguf'" in log.read_text().splitlines()[0]  # the marker quotes the argv


def test_adopting_reads_the_latest_attempt(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(
        marker_line(1, ["x"])
        + "\nold\n"
        + marker_line(3, ["x"])
        + "\nI listening on http://127.0.0.1:1\n"
    )
    attempts = AttemptLog(
        log, lambda line: SERVING_LINE.search(line) is not None, lambda: None, adopt=True
    )
    assert attempts.attempt == 3 and attempts.serving()
    assert attempts.lines() == ["I listening on http://127.0.0.1:1"]


def test_old_logs_are_pruned(tmp_path: Path) -> None:
    for i in range(LOGS_KEPT + 5):
        (tmp_path / f"llama-server-{i:03d}.log").write_text("x")
    fresh = new_log_path(tmp_path, "llama-server")
    assert len(list(tmp_path.glob("*.log"))) == LOGS_KEPT - 1
    assert (
        fresh.parent == tmp_path and not fresh.exists() and fresh.name.startswith("llama-server-")
    )
