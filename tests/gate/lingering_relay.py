"""A loopback TCP relay in front of the real llama-server that holds back what the engine
sends after a stream's last event, for a while.

Why: a client that closes as soon as it has read the last event (Codex does, after
``response.completed``) races the gate, which is still waiting for the engine's end of
stream. On a fast machine the engine's end wins and the race cannot be seen; the relay
makes the gate lose it every time, with the engine's own bytes (nothing is made up, only
delayed).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

LAST_EVENTS = (b"response.completed", b"message_stop", b"data: [DONE]")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold_s: float) -> None:
    seen = b""
    held = False
    try:
        while data := await reader.read(65536):
            if not held:
                seen = (seen + data)[-4096:]
                at = max(seen.find(e) for e in LAST_EVENTS)
                end = seen.find(b"\n\n", at) if at >= 0 else -1
                if end >= 0:  # the last event is whole: pass it, then hold the rest
                    cut = len(data) - (len(seen) - (end + 2))
                    writer.write(data[:cut])
                    await writer.drain()
                    held = True
                    await asyncio.sleep(hold_s)
                    data = data[cut:]
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


@contextmanager
def lingering_relay(engine_url: str, hold_s: float = 3.0) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` relaying to ``engine_url``; each answer's bytes after its
    last event reach the gate ``hold_s`` late."""
    host, port = engine_url.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, object] = {}

    pipes: set[asyncio.Task] = set()

    async def handle(down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(host, int(port))
        for pipe in (_pipe(down_r, up_w, 0.0), _pipe(up_r, down_w, hold_s)):
            task = asyncio.ensure_future(pipe)
            pipes.add(task)
            task.add_done_callback(pipes.discard)

    async def main() -> None:
        stop = asyncio.Event()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        box["port"] = server.sockets[0].getsockname()[1]
        box["stop"] = stop
        started.set()
        async with server:
            await stop.wait()
        for task in list(pipes):
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{box['port']}"
    finally:
        loop.call_soon_threadsafe(box["stop"].set)  # type: ignore[attr-defined]
        thread.join(10)
        loop.close()
