"""``GateRunner``: one gate on its own thread and asyncio event loop.

``start()`` returns the gate's URL once it listens (or raises a :class:`GateError`:
the port is taken, the settings are wrong); ``stop()`` closes the listener, the clients
and the engine connections and joins the thread (idempotent); ``state()`` is a frozen
:class:`GateState`, safe to call from any thread.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
from typing import Any

from aiohttp import web

from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.ports import port_holder
from homelab.gate.core import Gate
from homelab.gate.errors import GateError, GatePortInUseError
from homelab.gate.limits import Limits
from homelab.gate.server import build_app
from homelab.gate.settings import GateSettings
from homelab.gate.sockets import CappedRunner, connection_cap
from homelab.gate.state import GateState

SERVER_LOG = logging.getLogger("homelab.gate.server")
LOOP_LOG = logging.getLogger("homelab.gate.loop")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
RETARGET_TIMEOUT_S = 15.0
SHUTDOWN_GRACE_S = 2.0
"""How long ``stop()`` lets running requests finish before closing their connections."""


class GateRunner:
    """The gate in front of ``engine_url`` (a loopback URL), with ``facts`` from the plan
    (None: the limits come from the engine's ``/props`` on the first request), sending
    ``engine_key`` (the engine's own key; None: it has none) on every call to the engine."""

    def __init__(
        self,
        settings: GateSettings,
        engine_url: str,
        facts: PlanFacts | None,
        engine_key: str | None = None,
    ) -> None:
        settings.check()
        self.settings = settings
        self.engine_url = engine_url
        self._engine_key = engine_key
        self.facts = facts
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._gate: Gate | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> str:
        """Listen; returns the gate's URL (``http://HOST:PORT``)."""
        with self._lock:
            if self._thread is not None:
                if self.url is None:
                    raise GateError("The gate failed to start earlier; make a new one.")
                return self.url
            self._thread = threading.Thread(target=self._main, name="homelab-gate", daemon=True)
            self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            raise GateError(f"The gate did not start listening within {START_TIMEOUT_S:g} s.")
        if self._error is not None:
            self._thread.join(STOP_TIMEOUT_S)
            error = self._error
            if isinstance(error, GateError):
                raise error
            raise GateError(f"The gate could not start: {error}") from error
        assert self.url is not None
        return self.url

    @property
    def serving(self) -> bool:
        """True while the gate's thread runs (started and not stopped, nor ended by a fault)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopped

    def stop(self) -> None:
        """Stop listening, close every connection, join the thread. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop closed in between
                pass
        thread.join(STOP_TIMEOUT_S)

    def state(self) -> GateState:
        """The gate's numbers now (read on the gate's loop; usable from any thread)."""
        gate, loop = self._gate, self._loop
        if gate is None or loop is None or loop.is_closed():
            return GateState(url=self.url, engine_url=self.engine_url)
        if threading.current_thread() is self._thread:  # called on the gate's own loop
            return gate.state()
        try:
            return asyncio.run_coroutine_threadsafe(_state(gate), loop).result(timeout=5.0)
        except (RuntimeError, TimeoutError):
            return gate.state()

    def retarget(self, facts: PlanFacts | None) -> Limits | None:
        """The engine now runs on another plan (``facts``; None: ask its ``/props``): the
        live queue takes its limits (see :meth:`Gate.retarget`). Returns the limits in
        force; None when the gate does not run (the facts are kept for its start)."""
        self.facts = facts
        gate, loop = self._gate, self._loop
        if gate is None or loop is None or loop.is_closed():
            return None
        try:
            future = asyncio.run_coroutine_threadsafe(gate.retarget(facts), loop)
            return future.result(timeout=RETARGET_TIMEOUT_S)
        except (RuntimeError, TimeoutError):
            return None

    # -- the gate's thread ---------------------------------------------------------------

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_loop_error)  # the gate's log, not asyncio's traceback
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as error:  # reported by start(), never lost
            self._error = self._error or error
        finally:
            self._started.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        app = await self._open()
        runner = CappedRunner(  # bounded in time and number (homelab.gate.sockets)
            app,
            max_connections=connection_cap(self.settings.max_connections),
            keepalive_timeout=self.settings.idle_timeout_s,
            handler_cancellation=True,
            access_log=None,
            logger=SERVER_LOG,  # aiohttp's server errors: the gate's rate-limited log
            shutdown_timeout=SHUTDOWN_GRACE_S,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.settings.host, self.settings.port, reuse_address=True)
            try:
                await site.start()
            except OSError as error:
                raise self._bind_error(error) from None
            port = _bound_port(runner, self.settings.port)
            host = (
                self.settings.host if ":" not in self.settings.host else f"[{self.settings.host}]"
            )
            self._listening(f"http://{host}:{port}")
            self._started.set()
            await self._stopping.wait()
        finally:
            await runner.cleanup()
            await self._close()

    async def _open(self) -> web.Application:
        """The gate's application (made on the gate's loop)."""
        self._gate = Gate(self.settings, self.engine_url, self.facts, self._engine_key)
        return build_app(self._gate)

    def _listening(self, url: str) -> None:
        self.url = url
        if self._gate is not None:
            self._gate.url = url

    async def _close(self) -> None:
        if self._gate is not None:
            await self._gate.close()

    def _bind_error(self, error: OSError) -> GateError:
        where = f"{self.settings.host}:{self.settings.port}"
        if error.errno == errno.EADDRINUSE:
            holder = port_holder(self.settings.port)
            who = f" by {holder}" if holder else ""
            return GatePortInUseError(
                f"The gate cannot listen on {where}: the port is in use{who}.",
                hint="Choose another port in the gate's port setting, or stop the program "
                "that holds it.",
            )
        return GateError(
            f"The gate cannot listen on {where}: {error.strerror or error}.",
            hint="Check the gate's host and port settings.",
        )


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An error on the gate's event loop (a callback that raised, a socket it could not
    accept): one line of the gate's log, its traceback rate-limited with the rest."""
    error = context.get("exception")
    kind = type(error).__name__ if error is not None else "no exception"
    text = f"{context.get('message', 'event loop error')} ({kind})"  # its own kind
    LOOP_LOG.error(text, exc_info=error)


async def _state(gate: Gate) -> GateState:
    return gate.state()


def _bound_port(runner: web.AppRunner, asked: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return asked
