"""The soak's mix of clients against a gate (loopback only), shared by the suite's short soak
(``tests/gate/test_gate_soak.py``) and the on-demand one (``bench/bench_gate_soak.py``).

One good client sends the same small chats, streamed and not, one after another, and
times each (run alone first, it is the baseline; the same loop runs during the soak).
Beside it, hostile clients, each a loop with its own pace so the whole is bounded in rate
and count: bad JSON bodies, oversized prompts, streams dropped after their first chunk,
idle sockets, and slow senders (a header byte every :data:`SLOW_BYTE_S`). Every exchange
has a deadline: one that passes is counted (``... no answer``), never waited out.

Outcomes are counted by ``"client status"``; a good request not answered 200 (or a stream
without its last event) is also kept in :attr:`Tally.failures` with why.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

CHAT = "/v1/chat/completions"
PROMPT = "In one short sentence: why is the sky blue?"
GOOD_MAX_TOKENS = 8
DEADLINE_S = 120.0
"""The most one exchange may take (a loaded 2-core machine) before it counts as unanswered."""
SLOW_BYTE_S = 0.5
BAD_BODIES = (
    b'{"messages": [{"role": "user", "content": "x"}',
    b'{"messages": "not a list", "max_tokens": 2}',
    b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": NaN}',
    b'{"messages": [], "n": -1}',
    b"[" * 200 + b"]" * 200,
    b"\xff\xfe{not json at all",
    b'{"prompt": "no messages here"}',
)


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    good_s: list[float] = field(default_factory=list)
    """Each good request's round trip (seconds), in order."""
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Pace:
    """Seconds between one hostile client's requests (each loop runs one at a time)."""

    bad_json: float = 0.2
    oversized: float = 1.0
    dropped: float = 2.0
    idle: float = 1.0
    slow: float = 3.0


def good_body(stream: bool) -> bytes:
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": GOOD_MAX_TOKENS,
        "temperature": 0,
        "stream": stream,
    }
    return json.dumps(body).encode()


def oversized_body(words: int) -> bytes:
    text = " ".join(["apple", "river", "stone", "cloud"] * (words // 4))
    return json.dumps({"messages": [{"role": "user", "content": text}]}).encode()


class Mix:
    """The clients against ``url`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, url: str, *, oversized_words: int = 3000) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.oversized = oversized_body(oversized_words)
        self.tally = Tally()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(self.host, self.port)

    def _request(self, body: bytes) -> bytes:
        return (
            b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n"
            % (CHAT.encode(), self.host.encode(), self.port, len(body))
        ) + body

    async def post(self, body: bytes) -> tuple[int, bytes]:
        """(status, whole raw answer after the status line); closes the connection."""
        reader, writer = await self._open()
        try:
            writer.write(self._request(body))
            await writer.drain()
            data = await reader.read()  # Connection: close: the answer ends at EOF
        finally:
            writer.close()
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
        return status, data

    async def good(self, stream: bool) -> None:
        started = time.monotonic()
        try:
            status, data = await asyncio.wait_for(self.post(good_body(stream)), DEADLINE_S)
        except (TimeoutError, OSError) as error:
            self._fail(f"good stream={stream}: {type(error).__name__} {error}")
            return
        took = time.monotonic() - started
        whole = b"data: [DONE]" in data if stream else data.rstrip().endswith(b"}")
        if status == 200 and whole:
            self.tally.good_s.append(took)
            self.tally.outcomes["good 200"] += 1
        else:
            self._fail(f"good stream={stream}: {status} {data[-300:]!r}")

    def _fail(self, why: str) -> None:
        self.tally.outcomes["good FAILED"] += 1
        self.tally.failures.append(why)

    async def refused(self, name: str, body: bytes) -> None:
        try:
            status, _ = await asyncio.wait_for(self.post(body), DEADLINE_S)
        except (TimeoutError, OSError) as error:
            self.tally.outcomes[f"{name} {type(error).__name__}"] += 1
            return
        self.tally.outcomes[f"{name} {status}"] += 1

    async def dropped(self) -> None:
        """A long stream read up to its first body bytes, then the socket closed."""
        body = json.loads(good_body(True))
        body.update(max_tokens=256, ignore_eos=True)
        try:
            reader, writer = await self._open()
        except OSError as error:
            self.tally.outcomes[f"dropped {type(error).__name__}"] += 1
            return
        try:
            writer.write(self._request(json.dumps(body).encode()))
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE_S)
            await asyncio.wait_for(reader.read(1), DEADLINE_S)
            self.tally.outcomes[f"dropped {head.split(b' ', 2)[1].decode()}"] += 1
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as error:
            self.tally.outcomes[f"dropped {type(error).__name__}"] += 1
        finally:
            writer.close()

    async def idle(self, idle_timeout_s: float) -> None:
        """A socket that sends nothing: the gate must close it after its idle timeout."""
        await self._silent("idle", b"", idle_timeout_s)

    async def slow(self, idle_timeout_s: float) -> None:
        """Headers a byte every :data:`SLOW_BYTE_S`: never whole before the idle timeout."""
        await self._silent("slow", self._request(good_body(False)), idle_timeout_s)

    async def _silent(self, name: str, trickle: bytes, idle_timeout_s: float) -> None:
        try:
            reader, writer = await self._open()
        except OSError as error:
            self.tally.outcomes[f"{name} {type(error).__name__}"] += 1
            return
        bound = time.monotonic() + idle_timeout_s + 30.0
        try:
            for byte in trickle:
                if reader.at_eof() or time.monotonic() > bound:
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(SLOW_BYTE_S)
            left = max(0.1, bound - time.monotonic())
            data = await asyncio.wait_for(reader.read(), left)
            self.tally.outcomes[f"{name} closed by gate{' (answered)' if data else ''}"] += 1
        except TimeoutError:
            self.tally.outcomes[f"{name} NOT closed"] += 1
        except OSError:
            self.tally.outcomes[f"{name} closed by gate"] += 1
        finally:
            writer.close()

    async def good_loop(self, until: float, most: int) -> None:
        """Good requests one after another, streamed and not in turn, until ``until`` or
        ``most`` of them."""
        for i in range(most):
            if time.monotonic() >= until:
                return
            await self.good(stream=i % 2 == 1)

    async def soak(self, seconds: float, pace: Pace, idle_timeout_s: float) -> None:
        """Every client at once for ``seconds`` (each loop bounded by its pace)."""
        until = time.monotonic() + seconds

        async def every(pause: float, make) -> None:
            while time.monotonic() < until:
                await make()
                await asyncio.sleep(pause)

        bad = iter(range(1 << 30))
        await asyncio.gather(
            self.good_loop(until, most=int(seconds * 20) + 1),
            every(pace.bad_json, lambda: self.refused("bad-json", BAD_BODIES[next(bad) % 7])),
            every(pace.oversized, lambda: self.refused("oversized", self.oversized)),
            every(pace.dropped, self.dropped),
            every(pace.idle, lambda: self.idle(idle_timeout_s)),
            every(pace.slow, lambda: self.slow(idle_timeout_s)),
        )
