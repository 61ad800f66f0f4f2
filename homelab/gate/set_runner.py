"""``SetGateRunner``: the gate of a set of models on its own thread and event loop (as
:class:`~homelab.gate.runner.GateRunner` runs a gate of one engine), with the resident
models loaded through it once it listens."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

from aiohttp import web

from homelab.gate.errors import GateError
from homelab.gate.model_pool import ModelPool
from homelab.gate.runner import GateRunner
from homelab.gate.set_server import build_set_app, set_state
from homelab.gate.settings import GateSettings
from homelab.gate.state import GateState


class SetGateRunner(GateRunner):
    """``make_pool()`` (called on the gate's loop) gives the set's :class:`ModelPool`."""

    def __init__(self, settings: GateSettings, make_pool: Callable[[], ModelPool]) -> None:
        super().__init__(settings, "", None)
        self._make_pool = make_pool
        self.pool: ModelPool | None = None

    async def _open(self) -> web.Application:
        self.pool = self._make_pool()
        return build_set_app(self.pool)

    def _listening(self, url: str) -> None:
        self.url = url
        if self.pool is not None:
            self.pool.url = url

    async def _close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    def load(self, resident: Sequence[str], timeout_s: float) -> None:
        """Load ``resident`` (the placement's residents) and return once they are ready.

        Raises:
            GateError: the gate does not run, or they were not loaded in ``timeout_s``.
            HomelabError: a resident's engine failed to start (its own error).
        """
        pool, loop = self.pool, self._loop
        if pool is None or loop is None or loop.is_closed():
            raise GateError("The gate of the models does not run.")
        future = asyncio.run_coroutine_threadsafe(pool.start(resident), loop)
        try:
            future.result(timeout=timeout_s)
        except TimeoutError:
            future.cancel()
            raise GateError(
                f"The resident models were not loaded within {timeout_s:g} s."
            ) from None

    def state(self) -> GateState:
        pool, loop = self.pool, self._loop
        if pool is None or loop is None or loop.is_closed():
            return GateState(url=self.url, engine_url="")
        if threading.current_thread() is self._thread:
            return set_state(pool, self.url)
        try:
            return asyncio.run_coroutine_threadsafe(_state(pool, self.url), loop).result(5.0)
        except (RuntimeError, TimeoutError):
            return set_state(pool, self.url)


async def _state(pool: ModelPool, url: str | None) -> GateState:
    return set_state(pool, url)
