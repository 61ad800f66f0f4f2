"""The gate's pure parts: settings, limits, the cap written into a request, conversation
keys, the slot book, reuse alarms and the stream tally."""

from __future__ import annotations

import json

import pytest

from homelab.engine.llamacpp.answers import parse_props
from homelab.engine.supervision.facts import PlanFacts
from homelab.errors import ExitCode, UsageError
from homelab.gate.affinity import ALARM_MIN_PROMPT, ReuseBook, SlotBook
from homelab.gate.errors import BadRequest
from homelab.gate.limits import resolve_limits
from homelab.gate.requests import ROUTES, completion_cap, forwarded_body, parse
from homelab.gate.settings import GateSettings
from homelab.gate.sse import StreamTally, outcome_of

CHAT = ROUTES["/v1/chat/completions"]


def facts(*, slots: int, ctx: int, unified: bool) -> PlanFacts:
    per_slot = ctx if unified else ctx // slots
    return PlanFacts(slots, ctx, per_slot, ctx, unified, "f16", "f16")


def test_settings_off_loopback_need_a_key_and_bad_values_name_their_setting() -> None:
    GateSettings(port=8080).check()
    GateSettings(host="0.0.0.0", port=8080, api_key="secret").check()
    with pytest.raises(UsageError) as raised:
        GateSettings(host="0.0.0.0", port=8080).check()
    assert "api_key" in (raised.value.hint or "") and raised.value.exit_code is ExitCode.USAGE
    for bad, name in (
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"token_budget": -5}, "token_budget"),
        ({"queue_timeout_s": float("inf")}, "queue_timeout_s"),
        ({"port": 70000}, "port"),
        ({"max_queue": -1}, "max_queue"),
        ({"api_key": " "}, "api_key"),
    ):
        with pytest.raises(UsageError, match=name):
            GateSettings(**{"port": 8080, **bad}).check()


def test_limits_from_a_unified_pool_split_slots_props_and_settings() -> None:
    s = GateSettings(port=1)
    unified = resolve_limits(s, facts(slots=4, ctx=4096, unified=True), None)
    assert unified is not None
    assert (unified.budget_tokens, unified.ceiling_tokens, unified.max_concurrent) == (
        3481,
        3481,
        4,
    )
    split = resolve_limits(s, facts(slots=2, ctx=4096, unified=False), None)
    assert split is not None
    assert (split.budget_tokens, split.ceiling_tokens, split.max_concurrent) == (4096, 2048, 2)
    props = parse_props({"total_slots": 2, "default_generation_settings": {"n_ctx": 2048}})
    from_props = resolve_limits(s, None, props)
    assert from_props is not None and (from_props.budget_tokens, from_props.max_concurrent) == (
        1740,
        2,
    )
    assert resolve_limits(s, None, None) is None
    mine = resolve_limits(
        GateSettings(port=1, token_budget=1000, max_concurrent=1),
        facts(slots=2, ctx=4096, unified=False),
        None,
    )
    assert mine is not None
    assert (mine.budget_tokens, mine.ceiling_tokens, mine.max_concurrent) == (1000, 1000, 1)


def chat_body(**extra: object) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": "hi"}], **extra}).encode()


def test_the_cap_is_written_when_absent_or_larger_and_kept_when_smaller() -> None:
    absent = parse(CHAT, chat_body())
    assert completion_cap(absent, 100, cap=8192, ceiling=3000) == 2900
    assert json.loads(forwarded_body(absent, 2900, None))["max_tokens"] == 2900
    larger = parse(CHAT, chat_body(max_completion_tokens=65536))
    assert completion_cap(larger, 100, cap=8192, ceiling=100000) == 8192
    sent = json.loads(forwarded_body(larger, 8192, 1))
    assert sent["max_completion_tokens"] == 8192 and "max_tokens" not in sent
    assert sent["id_slot"] == 1
    smaller = parse(CHAT, chat_body(max_tokens=16))
    assert completion_cap(smaller, 100, cap=8192, ceiling=3000) == 16
    assert json.loads(forwarded_body(smaller, 16, None))["max_tokens"] == 16
    unlimited = parse(ROUTES["/completion"], b'{"prompt": "x", "n_predict": -1}')
    assert unlimited.max_tokens is None
    assert json.loads(forwarded_body(unlimited, 500, None))["n_predict"] == 500
    assert completion_cap(absent, 3000, cap=8192, ceiling=3000) == 0  # the prompt fills it


def test_malformed_requests_are_refused_by_the_gate() -> None:
    for raw in (b"{bad", b"[1, 2]", b'{"messages": []}', b'{"messages": [{}], "max_tokens": "9"}'):
        with pytest.raises(BadRequest):
            parse(CHAT, raw)
    with pytest.raises(BadRequest):
        parse(ROUTES["/v1/completions"], b'{"max_tokens": 3}')


def test_the_conversation_key_is_its_system_prompt_and_first_user_message() -> None:
    first = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"}]
    later = [*first, {"role": "assistant", "content": "A"}, {"role": "user", "content": "U2"}]
    other = [{"role": "system", "content": "S"}, {"role": "user", "content": "V1"}]
    key = parse(CHAT, json.dumps({"messages": first}).encode()).conversation
    assert key is not None
    assert parse(CHAT, json.dumps({"messages": later}).encode()).conversation == key
    assert parse(CHAT, json.dumps({"messages": other}).encode()).conversation != key
    anthropic = ROUTES["/v1/messages"]
    a = parse(anthropic, json.dumps({"system": "S", "messages": first[1:]}).encode())
    b = parse(anthropic, json.dumps({"system": "T", "messages": first[1:]}).encode())
    assert a.conversation != b.conversation


def test_the_slot_book_keeps_a_conversation_on_its_slot_while_it_is_free() -> None:
    book = SlotBook(2)
    a = book.take("a")
    b = book.take("b")
    assert {a, b} == {0, 1}
    assert book.take("c") is None  # both busy
    book.give(a)
    book.give(b)
    assert book.take("b") == b and book.take("a") == a
    book.give(a)
    assert book.take("new") == a  # the only free slot
    book.give(b)
    assert book.take("b") == b


def test_a_known_conversation_that_reprocesses_its_prompt_raises_an_alarm() -> None:
    book = ReuseBook(clock=lambda: 1.0)
    n = ALARM_MIN_PROMPT * 2
    assert book.record("a", 0, n, 0) is None  # a first turn never alarms
    assert book.record("a", n, 40, 0) is None  # reused
    alarm = book.record("a", 10, n + 50, 1)
    assert alarm is not None and alarm.slot == 1 and alarm.cached_tokens == 10
    assert "re-processed" in alarm.describe()
    assert book.record(None, 0, n, None) is None
    assert book.hit_rate == pytest.approx((n + 10) / (n + n + 40 + n + 60 + n))


def test_the_stream_tally_reads_timings_split_across_chunks_and_errors() -> None:
    final = {"choices": [], "timings": {"cache_n": 30, "prompt_n": 5, "predicted_n": 7}}
    stream = (
        b'data: {"choices": [{"delta": {"content": "x"}}]}\n\ndata: '
        + json.dumps(final).encode()
        + b"\n\ndata: [DONE]\n\n"
    )
    tally = StreamTally()
    for i in range(0, len(stream), 7):
        tally.feed(stream[i : i + 7])
    assert (tally.outcome.cached, tally.outcome.processed, tally.outcome.completion) == (30, 5, 7)
    tally.feed(b'data: {"error": {"message": "Context size has been exceeded"}}\n\n')
    assert tally.errors == 1 and "Context" in (tally.outcome.error or "")
    anthropic = outcome_of(b'{"usage": {"cache_read_input_tokens": 30, "input_tokens": 1}}')
    assert (anthropic.cached, anthropic.processed) == (30, 1)
    openai = outcome_of(
        b'{"usage": {"prompt_tokens": 31, "prompt_tokens_details": {"cached_tokens": 20}}}'
    )
    assert (openai.cached, openai.processed, openai.prompt) == (20, 11, 31)


@pytest.mark.parametrize(
    "last",
    [
        b"data: [DONE]\n\n",  # chat and completions
        b'event: response.completed\ndata: {"type":"response.completed","response":{}}\n\n',
        b'data: {"type":"response.completed","response":{"usage":{"input_tokens":3}}}\n\n',
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',  # Anthropic
    ],
)
def test_the_stream_tally_knows_when_the_last_event_has_passed(last: bytes) -> None:
    tally = StreamTally()
    # an answer that speaks of the markers: its words are inside an escaped JSON string
    said = json.dumps({"choices": [{"delta": {"content": 'data: [DONE] "message_stop"'}}]})
    typed = json.dumps({"type": "response.output_text.delta", "delta": "response.completed"})
    for line in (said, typed):
        tally.feed(b"data: " + line.encode() + b"\n\n")
    tally.feed(b"event: response.output_text.delta\n: message_stop\n\n")
    assert not tally.ended
    for i in range(0, len(last), 5):  # split across chunks
        tally.feed(last[i : i + 5])
    assert tally.ended


def test_a_runner_not_started_reports_an_empty_state_and_stops_quietly() -> None:
    from homelab.gate.runner import GateRunner

    runner = GateRunner(GateSettings(port=0), "http://127.0.0.1:9", None)
    state = runner.state()
    assert state.url is None and state.budget_tokens is None
    assert state.refused == {"queue_full": 0, "too_large": 0, "timeout": 0, "client_gone": 0}
    assert json.loads(json.dumps(state.to_json()))["refused"]["timeout"] == 0
    runner.stop()
    runner.stop()
    with pytest.raises(UsageError):
        GateRunner(GateSettings(host="0.0.0.0", port=0), "http://127.0.0.1:9", None)


def test_fields_the_client_lacks_are_appended_to_its_own_bytes() -> None:
    raw = b'{"messages": [{"role": "user", "content": "h\\u00e9"}],  "temperature": 0}'
    sent = forwarded_body(parse(CHAT, raw), 300, 1)
    assert sent.startswith(raw[:-1])  # the client's JSON, not serialized again
    assert json.loads(sent) == {**json.loads(raw), "max_tokens": 300, "id_slot": 1}
    over = forwarded_body(parse(CHAT, chat_body(max_tokens=9000)), 300, None)
    assert over.count(b"max_tokens") == 1 and json.loads(over)["max_tokens"] == 300


def test_a_long_answer_has_only_its_accounting_parsed() -> None:
    text = 'she said "timings": {"prompt_n": 999} ' * 200  # quoted keys in a string do not count
    body = json.dumps(
        {
            "choices": [{"message": {"content": text}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 7},
            "timings": {"cache_n": 30, "prompt_n": 10, "predicted_n": 7},
        }
    ).encode()
    assert len(body) > 4096
    outcome = outcome_of(body)
    assert (outcome.cached, outcome.processed, outcome.completion) == (30, 10, 7)
