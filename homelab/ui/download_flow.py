"""The download key: pick a quant of the picked preset's repo, pull it into the HF cache,
with progress; escape cancels (from a field, the first escape leaves the field).

``d`` opens the chooser (:class:`homelab.ui.quant_screen.QuantScreen`): the repo's quants
judged on this card as ``homelab quants`` judges them, the best preselected; enter there
starts the download of the chosen one (offline or on a Hub error, of the preset's own).

A mixin of :class:`homelab.ui.app.HomelabApp`. The pull runs in a thread worker; on
escape its progress callback raises at the next chunk, which stops the pull and keeps
the partial file (``blobs/<sha256>.incomplete``): the panel says how many bytes are
kept, and the next ``d`` resumes from them (the domain asks the Hub for the rest with a
``Range`` and checks the sha256 of the whole file). Quitting cancels the same way and
waits for the worker, so the partial file is left for a resume and nothing raises.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from textual import work
from textual.actions import SkipAction
from textual.widgets import Input

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.catalog import ModelEntry
from homelab.ui.flow import AppFlow
from homelab.ui.messages import DownloadEnded, DownloadProgress, while_mounted
from homelab.ui.quant_screen import QuantScreen
from homelab.ui.widgets.download import DownloadBar
from homelab.ui.widgets.plan import PlanPanel

if TYPE_CHECKING:
    from homelab.hub.download import PullProgress
    from homelab.serve.quant_choice import QuantsOnCard

STOP_WAIT_S = 10.0
"""How long quitting waits for a cancelled download's worker (it stops at the next chunk)."""


class DownloadFlow(AppFlow):
    """One download at a time, of a quant of the picked preset's repo."""

    def _download_init(self) -> None:
        self.download_cancel: threading.Event | None = None
        """Set to cancel the running download (None: none runs)."""
        self._download_ended = threading.Event()
        """Set when the running download's worker is done."""

    def action_download(self) -> None:
        entry = self.state.picked.entry
        if entry is None:
            self.notify("Pick a preset (a model from the Hub) first.", title="Nothing to download")
            return
        if entry.preset is None:
            self.notify(
                f"{entry.name} is a file here already; d downloads presets (★).",
                title="Nothing to download",
            )
            return
        if self.download_cancel is not None:
            self.notify("A download is running (escape cancels it).", title="Downloading")
            return
        preset = entry.preset
        values = self.query_one("#plan", PlanPanel).values()  # the picked row's fields

        def load() -> QuantsOnCard:
            """In the chooser's worker: the quants on the card as the app last read it."""
            from homelab.plan.card import card_for

            try:
                report = self.state.card.report or card_for(self.card_options())
                judged = backend.preset_quants(preset, report, self.plan_options(values))
            except HomelabError as error:
                self.hub_seen(backend.hub_unreachable(error))
                raise
            self.hub_seen(judged.listing.offline_reason)
            return judged

        def chosen(ref: str | None) -> None:
            if ref is not None and self.download_cancel is None:
                self._start_download(entry, ref)

        self.push_screen(QuantScreen(preset, load, self.hub_offline), chosen)

    def _start_download(self, entry: ModelEntry, ref: str) -> None:
        cancel, ended = threading.Event(), threading.Event()
        self.download_cancel, self._download_ended = cancel, ended
        self.query_one("#download", DownloadBar).start(f"{ref}: starting…")
        self.download_model(entry, ref, cancel, ended)

    def action_cancel_download(self) -> None:
        """Escape, wherever the focus is but a field (a priority binding): cancel the
        running download.

        With none running, a dialog open or a field focused, the key goes on to the focused
        widget (the field is left, the filter closes, a dialog answers no) as if this
        binding were not there."""
        cancel = self.download_cancel
        if cancel is None or cancel.is_set() or len(self.screen_stack) > 1:
            raise SkipAction
        if isinstance(self.focused, Input):
            raise SkipAction
        cancel.set()
        self.query_one("#download", DownloadBar).show_line("cancelling…", "yellow")

    def stop_download(self) -> None:
        """Cancel a running download and wait for its worker (on unmount: quitting)."""
        cancel = self.download_cancel
        if cancel is None:
            return
        cancel.set()
        self._download_ended.wait(STOP_WAIT_S)

    @work(thread=True, exclusive=True, group="download", exit_on_error=False)
    def download_model(
        self, entry: ModelEntry, ref: str, cancel: threading.Event, ended: threading.Event
    ) -> None:
        seen: dict[str, Any] = {"last": None, "fetching": False}

        def progress(p: PullProgress) -> None:
            if p.state == "downloading":
                seen["fetching"] = True
                if cancel.is_set() and p.file_done < p.file_total:
                    seen["last"] = p  # its bytes are on disk: the partial file keeps them
                    raise backend.DownloadCancelled
            self.post_from_thread(DownloadProgress(p))

        try:
            path = backend.download(ref, progress)
        except backend.DownloadCancelled:
            last = seen["last"]
            self.post_from_thread(
                DownloadEnded(entry.key, cancelled=True, kept=last.done, total=last.total)
            )
        except HomelabError as error:
            self.post_from_thread(DownloadEnded(entry.key, error=error))
        else:
            self.post_from_thread(DownloadEnded(entry.key, path=path, fetched=seen["fetching"]))
        finally:
            ended.set()

    @while_mounted
    def on_download_progress(self, message: DownloadProgress) -> None:
        self.query_one("#download", DownloadBar).show_progress(message.progress)

    @while_mounted
    def on_download_ended(self, message: DownloadEnded) -> None:
        self.download_cancel = None
        bar = self.query_one("#download", DownloadBar)
        if message.cancelled:
            bar.show_cancelled(message.kept or 0, message.total or 0)
        elif message.error is not None:
            bar.show_line(f"{message.error.title}: {message.error.message}", "red")
        elif message.path is not None:  # done
            bar.show_done(message.path, verified=message.fetched)
            self.list_models()  # the file is a row of the HF cache now (another quant's too)
            picked = self.state.picked.entry
            if picked is not None and picked.key == message.key:
                self.plan_picked(picked)  # now from the cache
