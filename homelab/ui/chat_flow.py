"""``t``: open the "try it" pane (:mod:`homelab.ui.chat_screen`) on the ready engine's URL,
or say why there is nothing to chat with.

A mixin of :class:`homelab.ui.app.HomelabApp`. The pane asks the URL the server panel
shows (the gate's, in front of the engine), so what a person tries is what an agent or a
client gets there: the gate's queue, ceiling and output cap included.
"""

from __future__ import annotations

from homelab.ui import backend
from homelab.ui.chat_screen import ChatScreen
from homelab.ui.flow import AppFlow
from homelab.ui.server_flow import GATE_OPENING


class ChatFlow(AppFlow):
    """See the module docstring."""

    def action_try_chat(self) -> None:
        """``t``: the chat pane on the ready URL; a note saying why when there is none."""
        health, running = self.state.health, self.state.running
        url = backend.public_url(running.session) if health.state == "ready" else None
        if not self.state.engine_alive():
            self.notify("No engine is running: s starts the picked model.", title="No chat")
            return
        if url is None:
            state = GATE_OPENING if health.state == "ready" else health.state
            self.notify(
                f"The engine is {state}: t works once the server panel says ready.",
                title="No chat",
            )
            return
        name = running.entry.name if running.entry is not None else "the model"
        self.push_screen(ChatScreen(url, name))
