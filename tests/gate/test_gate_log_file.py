"""The detached gate's log: rotated at its size bound, warnings and errors of one kind held
to a few a window (one traceback each window), request lines never held back. The filter is
tested on its bare state with a clock of the test's own; the rotation on a real file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from homelab.gate.log_file import RateLimit, log_to_file


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, level: int = logging.ERROR, name: str = "asyncio") -> logging.LogRecord:
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        exc_info = sys.exc_info()
    return logging.LogRecord(name, level, __file__, 1, msg, None, exc_info)


def test_a_flood_of_one_error_is_held_to_a_few_a_window_and_counted() -> None:
    clock = Clock()
    limit = RateLimit(per_window=3, window_s=60, clock=clock)
    passed = [
        r
        for r in (_record("socket.accept() out of system resource") for _ in range(1000))
        if limit.filter(r)
    ]
    assert len(passed) == 3
    assert passed[0].exc_info is not None  # the first keeps its traceback
    assert all(r.exc_info is None and r.exc_text is None for r in passed[1:])
    other = _record("another kind")  # a kind of its own has its own budget
    assert limit.filter(other) and other.exc_info is not None
    clock.now = 61.0  # the next window: the first says how many were held back
    record = _record("socket.accept() out of system resource")
    assert limit.filter(record)
    assert record.getMessage().endswith("[997 more like this were not logged]")
    assert record.exc_info is not None
    again = _record("socket.accept() out of system resource")
    assert limit.filter(again) and "more like this" not in again.getMessage()


def test_request_lines_are_never_held_back() -> None:
    limit = RateLimit(per_window=1, window_s=60, clock=Clock())
    lines = [
        _record("request {}", level=logging.INFO, name="homelab.gate.access") for _ in range(500)
    ]
    assert all(limit.filter(r) for r in lines)


@pytest.fixture
def clean_root():
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    homelab_level = logging.getLogger("homelab").level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    logging.getLogger("homelab").setLevel(homelab_level)


def test_the_log_rolls_over_at_its_bound_and_keeps_two_old_ones(tmp_path: Path, clean_root) -> None:
    path = tmp_path / "gate-1.log"
    log_to_file(path, max_bytes=64 * 1024, backups=2)
    access = logging.getLogger("homelab.gate.access")
    for i in range(20_000):  # ~1.6 MB of request lines: 25 times the bound
        access.info("request %s", "x" * 60 + str(i))
    logging.getLogger("aiohttp.access").info("aiohttp's own access line")  # below WARNING
    for _ in range(200):
        logging.getLogger("asyncio").error("socket.accept() out of system resource")
    files = sorted(tmp_path.iterdir())
    assert [p.name for p in files] == ["gate-1.log", "gate-1.log.1", "gate-1.log.2"]
    assert all(p.stat().st_size <= 64 * 1024 for p in files)
    text = "".join(p.read_text() for p in files)
    assert "request " + "x" * 60 + "19999" in text  # the newest lines are kept
    assert "aiohttp's own access line" not in text
    assert 0 < text.count("out of system resource") <= 10
