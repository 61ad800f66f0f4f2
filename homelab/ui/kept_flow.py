"""An engine homelab's keeper serves (``homelab serve --detach``): shown as it is, stopped
through its keeper, replaced only after a yes.

A mixin of :class:`homelab.ui.app.HomelabApp`. A kept engine is not this app's to adopt: its
keeper restarts it and its gate (:mod:`homelab.serve.keeper`), and two supervisors of one
engine would fight. The server panel says "kept" with the keeper's pid, the URL clients use
and how many restarts the keeper made; ``x`` asks, then stops the keeper (it stops its
engine and gate); ``s`` of the very model kept says it is already served, of another asks
before replacing it. While one is shown, a timer on the app's loop looks at the keeper's
process (a pid and start-time check, no I/O to speak of) and notices one that went away
(``homelab stop`` in a terminal): the panel then says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from textual import work
from textual.timer import Timer

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.flow import AppFlow
from homelab.ui.messages import EngineFailed, EngineKept, while_mounted
from homelab.ui.screens import ConfirmScreen
from homelab.ui.what_runs import record_as_picked
from homelab.ui.widgets.server import ServerPanel

if TYPE_CHECKING:
    from homelab.engine.supervision.record import EngineRecord
    from homelab.ui.catalog import ModelEntry
    from homelab.ui.state import Picked


def _name(record: EngineRecord) -> str:
    return os.path.basename(record.model)


KEEPER_CHECK_S = 1.0
"""How often a shown keeper's process is looked at."""


class KeptFlow(AppFlow):
    """See the module docstring."""

    _keeper_timer: Timer | None = None

    @while_mounted
    def on_engine_kept(self, message: EngineKept) -> None:
        gone = self.state.kept is not None and message.record is None
        if gone and message.said is not None:
            self.notify(message.said, title="Keeper")
        self.state.kept = message.record
        if self._keeper_timer is not None:
            self._keeper_timer.stop()
            self._keeper_timer = None
        if message.record is not None:
            self._keeper_timer = self.set_interval(KEEPER_CHECK_S, self.keeper_check)
        self._show_engine()

    def keeper_check(self) -> None:
        """A keeper stopped elsewhere is no longer shown as serving."""
        kept = self.state.kept
        if kept is not None and not kept.keeper_alive():
            said = f"homelab's keeper of {_name(kept)} (pid {kept.supervisor_pid}) has stopped."
            self.post_message(EngineKept(None, said))

    def show_kept(self, panel: ServerPanel) -> bool:
        """The server panel for a kept engine (False: none is kept)."""
        kept = self.state.kept
        if kept is None:
            return False
        up = None if kept.ready_at is None else time.time() - kept.ready_at
        restarts = kept.restarts
        last = f"; last restart: {restarts[-1].describe()}" if restarts else ""
        panel.show_state(
            "kept",
            kept.public_url,
            None if up is None else f"{int(up // 60)} min",
            len(restarts),
            None,
            _name(kept),
            note=(
                f"kept by homelab's keeper (pid {kept.supervisor_pid}): it restarts the engine "
                f"and its gate{last}. x stops it; s of another model replaces it."
            ),
        )
        return True

    def start_over_kept(self, entry: ModelEntry, picked: Picked, start: Callable) -> bool:
        """``s`` while a keeper serves: True when answered here (already served, or asked)."""
        kept = self.state.kept
        if kept is None or self.state.engine_alive():
            return False
        if not kept.keeper_alive():
            self.state.kept = None
            self._show_engine()
            return False
        where = f"{kept.public_url}, kept by homelab's keeper (pid {kept.supervisor_pid})"
        if record_as_picked(kept, picked):
            self.notify(f"{entry.name} is already served at {where}.", title="Running")
            return True
        question = f"{_name(kept)} is served at {where}. Stop it and start {entry.name}?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify(f"Starting {entry.name}…", title="Start")
                start(stop_first=False, replace=True)

        self.push_screen(ConfirmScreen(question, yes="Replace it"), answered)
        return True

    def stop_kept(self) -> bool:
        """``x`` while a keeper serves: asks, then stops it (True: there was one to stop)."""
        kept = self.state.kept
        if kept is None or self.state.engine_alive():
            return False
        question = (
            f"Stop {_name(kept)}, kept by homelab's keeper (pid {kept.supervisor_pid})? "
            f"Requests at {kept.public_url} fail until s starts one again."
        )
        self.push_screen(ConfirmScreen(question, yes="Stop it"), partial(self._stop_kept_if, kept))
        return True

    def _stop_kept_if(self, kept: EngineRecord, yes: bool | None) -> None:
        if yes:
            self.notify(f"Stopping {_name(kept)} and its keeper…", title="Stop")
            self._stop_keeper(kept)

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _stop_keeper(self, kept: EngineRecord) -> None:
        try:
            backend.stop_kept(kept)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
        self.post_message(EngineKept(None, f"Stopped {_name(kept)} and its keeper."))
