"""Hypothesis strategies for the gate fuzz (:mod:`tests.gate.test_gate_fuzz`), derived from
the routes' own schemas (:data:`homelab.gate.requests.ROUTES`): each route's prompt field,
its completion-bound fields and its system field get values that are valid, almost valid
(wrong types, huge, negative, float, empty, nested, mixed lists) or garbage; bodies are
then encoded as JSON, truncated, UTF-16, with a BOM, Latin-1 or raw bytes; headers carry
Content-Type variants and key garbage as raw bytes.

Sizes stay small on purpose: a generating request carries a tiny ``max_tokens`` and the
gate's ``max_tokens_cap`` is tiny, so 2 shared CPU cores run hundreds of examples in
minutes; what is fuzzed is the shape, not the volume (the soak does volume).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from homelab.gate.requests import Route

TEXT = st.text(max_size=24)
"""Any Unicode (lone surrogates included: JSON escapes them as ``\\udXXX``)."""
LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities too: Python's json writes and reads them
    TEXT,
)
JSON = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
NUMBER = st.one_of(
    st.integers(-3, 4),
    st.integers(),
    st.sampled_from([2**31, 2**63, 10**30, -(2**63), 10**400]),
    st.floats(),
    st.booleans(),
    st.sampled_from(["", "2", "many"]),
    st.none(),
    st.lists(st.integers(0, 4), max_size=2),
    st.dictionaries(TEXT, st.integers(), max_size=1),
)
"""A completion bound, ``n`` or a slot: valid small ones, huge, negative, float, wrong types."""
SMALL_TEXT = st.text(max_size=40)
ROLE = st.sampled_from(["user", "system", "assistant", "tool", "developer", "", "User", "🤖"])


def _content() -> st.SearchStrategy[Any]:
    part = st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "input_text", "x"]), "text": SMALL_TEXT}
    )
    return st.one_of(SMALL_TEXT, st.lists(part, max_size=2), JSON)


def _message() -> st.SearchStrategy[Any]:
    good = st.fixed_dictionaries({"role": ROLE, "content": _content()})
    return st.one_of(good, good, JSON)


MESSAGES = st.one_of(
    st.lists(_message(), min_size=1, max_size=3),
    st.just([]),
    JSON,
)
TOKEN = st.one_of(st.integers(0, 49151), st.integers(-5, -1), st.integers(49152, 10**12))
"""SmolLM2's vocabulary is 49,152 tokens: ids in it, negative, and past its end."""
TEXT_PROMPT = st.one_of(
    SMALL_TEXT,
    st.lists(TOKEN, min_size=1, max_size=6),
    st.lists(SMALL_TEXT, min_size=1, max_size=3),
    st.lists(st.one_of(SMALL_TEXT, st.lists(TOKEN, max_size=3), JSON), min_size=1, max_size=3),
    st.just(""),
    st.just([]),
    JSON,
)
RESPONSES_INPUT = st.one_of(
    SMALL_TEXT,
    st.lists(st.fixed_dictionaries({"role": ROLE, "content": _content()}), max_size=3),
    JSON,
)


def prompt_values(route: Route) -> st.SearchStrategy[Any]:
    if route.text_prompt:
        return TEXT_PROMPT
    if route.path == "/v1/responses":
        return RESPONSES_INPUT
    return MESSAGES


def weighted(*choices: tuple[st.SearchStrategy[Any], int]) -> st.SearchStrategy[Any]:
    """One of the strategies, each as often as its weight (``st.one_of`` picks its
    branches about evenly, and the same strategy named twice counts once)."""
    pool = [strategy for strategy, weight in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


GOOD_ROLE = st.sampled_from(["user", "system", "assistant"])


def valid_prompt(route: Route) -> st.SearchStrategy[Any]:
    """A prompt the engine runs: text, token ids, two texts; a short chat."""
    if route.text_prompt:
        return st.one_of(
            SMALL_TEXT,
            st.lists(st.integers(1, 49151), min_size=1, max_size=6),
            st.lists(SMALL_TEXT, min_size=2, max_size=2),
        )
    message = st.fixed_dictionaries({"role": GOOD_ROLE, "content": SMALL_TEXT})
    chat = st.lists(message, min_size=1, max_size=3)
    return st.one_of(SMALL_TEXT, chat) if route.path == "/v1/responses" else chat


def near_valid(route: Route) -> st.SearchStrategy[dict[str, Any]]:
    """A body that would run (small bounds, ``n`` 1-2, streamed or not), with at most one
    field spoiled (a wrong type, a huge or negative number, garbage): most of these reach
    the engine, which is where the gate's forwarding, capping and releasing are tried."""
    fine: dict[str, st.SearchStrategy[Any]] = {name: st.integers(0, 4) for name in route.cap_fields}
    fine.update(stream=st.booleans(), temperature=st.floats(0, 2))
    if not route.anthropic:
        fine["n"] = st.integers(1, 2)
    base = st.fixed_dictionaries({route.prompt_field: valid_prompt(route)}, optional=fine)
    names = [route.prompt_field, *fine, "id_slot", "stop", "model", "stream_options"]
    spoiled = st.dictionaries(
        st.sampled_from(names), st.one_of(NUMBER, JSON), min_size=1, max_size=1
    )
    spoil = weighted((st.just({}), 2), (spoiled, 1))
    return st.tuples(base, spoil).map(lambda both: {**both[0], **both[1]})


def bodies(route: Route) -> st.SearchStrategy[Any]:
    """A request body for ``route``: often one that would run with one field spoiled
    (:func:`near_valid`), else an object with the route's fields each valid, almost valid
    or garbage, sometimes another JSON value altogether."""
    optional: dict[str, st.SearchStrategy[Any]] = {name: NUMBER for name in route.cap_fields}
    optional.update(
        n=NUMBER,
        stream=st.one_of(st.booleans(), JSON),
        model=st.one_of(SMALL_TEXT, JSON),
        id_slot=NUMBER,
        temperature=NUMBER,
        stop=JSON,
        stream_options=st.one_of(st.just({"include_usage": True}), JSON),
    )
    if route.system_field is not None:
        optional[route.system_field] = st.one_of(SMALL_TEXT, JSON)
    shaped = st.fixed_dictionaries({route.prompt_field: prompt_values(route)}, optional=optional)
    missing = st.fixed_dictionaries({}, optional=optional)
    extra = st.dictionaries(TEXT, JSON, max_size=2)
    with_extra = st.tuples(shaped, extra).map(lambda both: {**both[1], **both[0]})
    return weighted((near_valid(route), 4), (shaped, 1), (with_extra, 1), (missing, 1), (JSON, 1))


def _encode(value: Any, how: str, cut: float) -> bytes:
    text = json.dumps(value, ensure_ascii=how == "ascii")
    if how == "utf-16":
        return text.encode("utf-16")  # with its BOM
    if how == "utf-16-le":
        return text.encode("utf-16-le")
    if how == "bom":
        return b"\xef\xbb\xbf" + text.encode("utf-8", "surrogatepass")
    if how == "latin-1":
        return text.encode("latin-1", "replace")
    raw = text.encode("utf-8", "surrogatepass")
    if how == "truncated":
        return raw[: int(len(raw) * cut)]
    if how == "bad-utf8":
        middle = len(raw) // 2
        return raw[:middle] + b"\xff\xc0\x80" + raw[middle:]
    return raw


ENCODINGS = ("utf-8", "utf-8", "utf-8", "ascii", "utf-16", "utf-16-le", "bom")
MANGLINGS = ("truncated", "bad-utf8", "latin-1")


def encoded(values: st.SearchStrategy[Any], hows: tuple[str, ...]) -> st.SearchStrategy[bytes]:
    return st.builds(_encode, values, st.sampled_from(hows), st.floats(0, 1))


def raw_bodies(route: Route) -> st.SearchStrategy[bytes]:
    """Bodies as bytes: the route's bodies encoded every way, mangled, or random bytes."""
    return weighted(
        (encoded(bodies(route), ENCODINGS), 6),
        (encoded(bodies(route), MANGLINGS), 2),
        (st.binary(max_size=64), 1),
        (st.just(b""), 1),
    )


HEADER_BYTES = st.binary(max_size=24).map(
    lambda b: bytes(c for c in b if c == 0x09 or c >= 0x20 and c != 0x7F)
)
"""A header value's bytes as RFC 9110 allows them on the wire (visible ASCII, space, tab,
and obs-text 0x80-0xFF, which is not UTF-8 in general)."""
CONTENT_TYPES = st.one_of(
    st.sampled_from(
        [
            b"application/json",
            b"application/json; charset=utf-8",
            b"application/json; charset=utf-16",
            b"text/plain",
            b"text/plain;charset=UTF-8",
            b"application/x-www-form-urlencoded",
            b"multipart/form-data; boundary=xyz",
            b"",
            b"application/json\xff",
        ]
    ),
    HEADER_BYTES,
)


def key_headers(key: str) -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    """Authorization and x-api-key: the right key (spelled several ways), garbage, raw
    non-ASCII bytes, empty, or none at all."""
    good = key.encode()
    values = st.one_of(
        st.sampled_from([good, good + b" ", good.upper(), good[:-1], good + b"\xff", b""]),
        HEADER_BYTES,
    )
    scheme = st.sampled_from([b"Bearer ", b"bearer ", b"BEARER  ", b"Basic ", b"", b"Bearer\t"])
    authorization = st.tuples(scheme, values).map(lambda p: (b"Authorization", p[0] + p[1]))
    api_key = values.map(lambda v: (b"x-api-key", v))
    return st.lists(st.one_of(authorization, api_key), max_size=2)


def headers(key: str) -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    content_type = st.lists(CONTENT_TYPES.map(lambda v: (b"Content-Type", v)), max_size=1)
    return st.tuples(content_type, key_headers(key)).map(lambda p: p[0] + p[1])


def passthrough_bodies(path: str, routes: dict[str, Route]) -> st.SearchStrategy[bytes]:
    """Bodies for the engine endpoints the gate passes through: the count endpoints get
    their route's bodies; ``/tokenize``, ``/detokenize`` and ``/apply-template`` their own
    fields, valid or not."""
    counted = {route.count_path: route for route in routes.values() if not route.text_prompt}
    if path in counted:
        return raw_bodies(counted[path])
    fields: dict[str, st.SearchStrategy[Any]] = {
        "/tokenize": {"content": TEXT_PROMPT},
        "/detokenize": {"tokens": st.one_of(st.lists(TOKEN, max_size=6), JSON)},
        "/apply-template": {"messages": MESSAGES},
    }[path]
    optional = {"add_special": JSON, "with_pieces": JSON, "parse_special": JSON}
    shaped = st.one_of(st.fixed_dictionaries(fields, optional=optional), JSON)
    return st.one_of(encoded(shaped, ENCODINGS), encoded(shaped, MANGLINGS), st.binary(max_size=64))
