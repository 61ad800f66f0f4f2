"""A set of models homelab serves (``homelab serve A B C``, another process): looked for at
start and then every refresh, shown in the card bar (each resident model its own part) and
in the server panel (the set's URL, each model's state, swaps and waits from its gate).

The set's engines are its serve's own: this app never adopts, stops or restarts them, and
``s`` starts no engine beside a set (it would take the set's card and port); ``homelab
stop`` stops a set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work

from homelab.ui.flow import AppFlow
from homelab.ui.messages import SetRead, while_mounted

if TYPE_CHECKING:
    from homelab.serve.set_view import SetView


class SetFlow(AppFlow):
    """See the module docstring."""

    def start_set_watch(self) -> None:
        """Look once now and, with a refresh, again every refresh."""
        self.look_for_set()
        refresh = self.state.args.refresh_s
        if refresh > 0:
            self.set_interval(max(refresh, 1.0), self.look_for_set)

    @work(thread=True, exclusive=True, group="set", exit_on_error=False)
    def look_for_set(self) -> None:
        from homelab.serve.set_view import served_set

        self.post_from_thread(SetRead(served_set()))

    @while_mounted
    def on_set_read(self, message: SetRead) -> None:
        before = self.state.served_set
        self.state.served_set = message.view
        if message.view != before:
            self._show_card()
            self._show_engine()


def set_refusal(view: SetView | None) -> str | None:
    """Why ``s`` starts nothing while ``view`` (a set of models) is served; None: no set."""
    if view is None:
        return None
    return (
        f"A set of {len(view.models)} models is served at {view.url}/v1 (homelab pid "
        f"{view.pid}): an engine started beside it would share its card. `homelab stop` "
        "stops the set first."
    )
