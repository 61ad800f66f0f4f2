"""A bounded fuzz of the gate's routes against the real llama-server (SmolLM2, loopback).

Hypothesis draws request bodies from each route's own schema (:mod:`tests.gate.fuzz_strategies`,
built on :data:`homelab.gate.requests.ROUTES`): valid, almost valid and garbage JSON, in
every encoding a client might send, and headers with Content-Type variants and key
garbage as raw bytes. The property, for every example:

- it is answered (a client deadline bounds each exchange: no hang);
- its status is below 500, except the documented 502/503 refusals (:data:`DOCUMENTED`);
- a 4xx carries an error body in the route's shape (OpenAI's, Anthropic's on
  ``/v1/messages``), a 200 JSON or a whole SSE stream (its last event, or an error event);
- nothing was logged at ERROR or with a traceback;
- afterwards the gate holds no charge, runs and queues nothing, and still serves a good
  request.

Bounded for CI: :data:`EXAMPLES` per route group (``HOMELAB_FUZZ_EXAMPLES`` to change),
derandomized (a failure the next run reproduces; the suite's rule,
``tests/test_fuzz_settings.py``), no deadline per example (a shared 2-core machine), a
``max_tokens_cap`` of 2 so nothing generates for long, and no example database written
into the tree. Derandomized, each run tries the same examples: a longer hunt is a larger
``HOMELAB_FUZZ_EXAMPLES`` (it draws more), as was done to find what
``test_gate_fuzz_found.py`` now pins.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from homelab.gate.requests import ROUTES
from homelab.gate.runner import GateRunner
from homelab.gate.server import PASSTHROUGH
from homelab.gate.settings import GateSettings
from homelab.gate.sse import LAST_EVENTS
from tests.gate.conftest import SPLIT_FACTS, wait_for
from tests.gate.fuzz_strategies import (
    bodies,
    encoded,
    headers,
    passthrough_bodies,
    raw_bodies,
)
from tests.gate.raw_http import Answer, exchange

pytestmark = pytest.mark.engine

EXAMPLES = int(os.environ.get("HOMELAB_FUZZ_EXAMPLES", "150"))
settings.register_profile(
    "gate-fuzz",
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=True,
)
FUZZ = settings(settings.get_profile("gate-fuzz"))
KEY = "fuzz-key-1"
CHAT = "/v1/chat/completions"
GOOD = b'{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}'
DOCUMENTED = {
    502: {"engine_unreachable"},
    503: {"engine_loading", "timeout", "too_many_connections"},
}
"""The 5xx the gate answers by design (an engine down or loading, an admission timeout,
the connection cap); none is expected against a healthy engine, but none is a bug."""
STREAM_ENDS = (b"[DONE]", b'"stop":true', b'"error"')
"""How a stream ends besides :data:`~homelab.gate.sse.LAST_EVENTS`: an OpenAI stream's
``[DONE]``, ``/completion``'s last chunk, an error event."""
EXCHANGE_S = 120.0
"""The most one exchange may take on a loaded 2-core machine before it counts as a hang."""


@pytest.fixture(scope="module")
def gates(engine: str) -> Iterator[dict[str, GateRunner]]:
    """One open gate and one keyed gate in front of the module's engine, kept across
    examples (a gate per example would fuzz start-up, not the routes)."""
    common: dict[str, Any] = {"port": 0, "max_tokens_cap": 2, "queue_timeout_s": 60.0}
    made = {
        "open": GateRunner(GateSettings(**common), engine, SPLIT_FACTS),
        "keyed": GateRunner(GateSettings(api_key=KEY, **common), engine, SPLIT_FACTS),
    }
    try:
        for runner in made.values():
            runner.start()
        yield made
    finally:
        for runner in made.values():
            runner.stop()


def check_answer(answer: Answer, path: str) -> None:
    """The property on one answer (see the module's docstring)."""
    anthropic = path in ("/v1/messages", "/v1/messages/count_tokens")
    status = answer.status
    event(f"status {status}")  # --hypothesis-show-statistics: what the examples reached
    if status >= 500:
        code = _error(answer, anthropic=False).get("code")
        assert code in DOCUMENTED.get(status, ()), (status, answer.body[:300])
    elif status >= 400:
        assert answer.headers.get("content-type", "").startswith("application/json"), answer
        error = _error(answer, anthropic=anthropic)
        assert isinstance(error.get("message"), str) and error["message"], answer.body[:300]
    elif status == 200:
        if answer.sse:  # whole: its last event, or an error event saying why not
            ends = (*STREAM_ENDS, *LAST_EVENTS)
            assert any(end in answer.body for end in ends), answer.body[-300:]
        else:
            assert isinstance(answer.json(), dict | list), answer.body[:300]  # a list: prompts
    else:
        pytest.fail(f"unexpected status {status}: {answer.body[:300]!r}")


def _error(answer: Answer, *, anthropic: bool) -> dict[str, Any]:
    body = answer.json()
    assert isinstance(body, dict), answer.body[:300]
    if anthropic:
        assert body.get("type") == "error", answer.body[:300]
    error = body.get("error")
    assert isinstance(error, dict) and isinstance(error.get("type"), str), answer.body[:300]
    return error


def settled_and_serving(runner: GateRunner, key: bytes | None = None) -> None:
    """The gate holds nothing (once the last answer's release ran) and serves a good chat."""

    def idle() -> bool:
        s = runner.state()
        return (s.charged_tokens, s.running, s.queued) == (0, 0, 0)

    wait_for(idle, what=f"the gate idle again (now {runner.state()})")
    auth = [] if key is None else [(b"x-api-key", key)]
    good = exchange(runner.url or "", CHAT, GOOD, [(b"Content-Type", b"application/json"), *auth])
    assert good.status == 200, good.body[:300]


def no_traceback(records: list[logging.LogRecord]) -> None:
    bad = [r for r in records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [f"{r.name}: {r.getMessage()}" for r in bad]


@pytest.mark.parametrize("path", list(ROUTES))
@FUZZ
@given(data=st.data())
def test_route_bodies(gates, caplog, path: str, data: st.DataObject) -> None:
    """Bodies valid, almost valid and garbage, encoded every way, on each route."""
    caplog.set_level(logging.WARNING)
    seen = len(caplog.records)
    body = data.draw(raw_bodies(ROUTES[path]), label="body")
    runner = gates["open"]
    answer = exchange(
        runner.url or "", path, body, [(b"Content-Type", b"application/json")], timeout_s=EXCHANGE_S
    )
    check_answer(answer, path)
    settled_and_serving(runner)
    no_traceback(caplog.records[seen:])


HOSTS = st.one_of(
    st.just(None),
    st.sampled_from(
        [b"127.0.0.1", b"localhost", b"[::1]:1", b"attacker.example", b"\xff\xfe", b"", b"a:b"]
    ),
)
ORIGINS = st.one_of(
    st.just([]),
    st.just([]),
    st.sampled_from([b"http://attacker.example", b"null", b"\xc3\x28", b""]).map(
        lambda o: [(b"Origin", o)]
    ),
)


@FUZZ
@given(
    path=st.sampled_from(list(ROUTES)),
    data=st.data(),
    head=headers(KEY),
    host=HOSTS,
    origin=ORIGINS,
)
def test_headers(gates, caplog, path, data, head, host, origin) -> None:
    """Content-Type variants, key garbage (raw non-ASCII bytes), foreign hosts and origins
    on the keyed gate, with a body that would be good or one that is not."""
    caplog.set_level(logging.WARNING)
    seen = len(caplog.records)
    route = ROUTES[path]
    body = data.draw(st.one_of(encoded(bodies(route), ("utf-8",)), raw_bodies(route)), label="b")
    runner = gates["keyed"]
    answer = exchange(runner.url or "", path, body, head + origin, host=host, timeout_s=EXCHANGE_S)
    check_answer(answer, path)
    settled_and_serving(runner, KEY.encode())
    no_traceback(caplog.records[seen:])


@pytest.mark.parametrize("path", [path for method, path in PASSTHROUGH if method == "POST"])
@FUZZ
@given(data=st.data())
def test_passthrough_bodies(gates, caplog, path: str, data: st.DataObject) -> None:
    """The engine endpoints the gate passes through (counts, tokenize, templates): answered,
    below 500, no traceback, the gate still serving."""
    caplog.set_level(logging.WARNING)
    seen = len(caplog.records)
    body = data.draw(passthrough_bodies(path, ROUTES), label="body")
    runner = gates["open"]
    answer = exchange(
        runner.url or "", path, body, [(b"Content-Type", b"application/json")], timeout_s=EXCHANGE_S
    )
    check_answer(answer, path)
    settled_and_serving(runner)
    no_traceback(caplog.records[seen:])
