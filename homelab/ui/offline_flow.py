"""Whether the Hub answers, said on screen: the offline line.

A mixin of :class:`homelab.ui.app.HomelabApp`. No probe at start (the first frame does
not wait for the network): the line appears when a Hub call the app makes anyway fails
for want of the network (a preset's header read, a download) and goes when one is
answered again; ``HF_HUB_OFFLINE`` shows it from the start. Everything that does not need
the Hub (local models, the presets' own facts, the card, the engine) keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from homelab.ui import backend
from homelab.ui.flow import AppFlow
from homelab.ui.messages import DownloadEnded, DownloadProgress, while_mounted
from homelab.ui.widgets.offline import OfflineBanner


@dataclass
class HubSeen(Message, bubble=False):
    """How the last Hub call went: None when the Hub answered, else why it could not."""

    reason: str | None


class OfflineFlow(AppFlow):
    """Keeps :attr:`hub_offline` (why the Hub is unreachable, or None) and the line."""

    def _offline_init(self) -> None:
        self.hub_endpoint, self.hub_offline = backend.hub_at_start()

    def hub_seen(self, reason: str | None) -> None:
        """Any thread: a Hub call went through (None) or could not reach it (why)."""
        self.post_message(HubSeen(reason))

    @while_mounted
    def on_mount(self) -> None:
        self._show_hub()

    @while_mounted
    def on_hub_seen(self, message: HubSeen) -> None:
        if message.reason != self.hub_offline:
            self.hub_offline = message.reason
            self._show_hub()

    @while_mounted
    def on_download_progress(self, message: DownloadProgress) -> None:
        if self.hub_offline is not None:  # bytes are arriving: the Hub answers
            self.hub_offline = None
            self._show_hub()

    @while_mounted
    def on_download_ended(self, message: DownloadEnded) -> None:
        if message.error is not None:
            self.on_hub_seen(HubSeen(backend.hub_unreachable(message.error)))
        elif message.path is not None:
            self.on_hub_seen(HubSeen(None))

    def _show_hub(self) -> None:
        banner = self.query_one("#offline", OfflineBanner)
        if self.hub_offline is None:
            banner.show_online()
        else:
            banner.show_offline(self.hub_endpoint, self.hub_offline)
