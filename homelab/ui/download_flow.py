"""The download key: pull the picked preset into the HF cache, with progress; escape cancels.

A mixin of :class:`homelab.ui.app.HomelabApp`. The pull runs in a thread worker; on
escape its progress callback raises at the next chunk, which stops the pull and keeps
the partial file (``blobs/<sha256>.incomplete``): the panel says how many bytes are
kept, and the next ``d`` resumes from them (the domain asks the Hub for the rest with a
``Range`` and checks the sha256 of the whole file). Quitting cancels the same way and
waits for the worker, so the partial file is left for a resume and nothing raises.
"""

from __future__ import annotations

import threading
from typing import Any

from textual import work
from textual.actions import SkipAction

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.catalog import ModelEntry
from homelab.ui.messages import DownloadEnded, DownloadProgress, while_mounted
from homelab.ui.widgets.download import DownloadBar

STOP_WAIT_S = 10.0
"""How long quitting waits for a cancelled download's worker (it stops at the next chunk)."""


class DownloadFlow:
    """One download at a time, of the picked preset's quant."""

    query_one: Any
    post_message: Any
    notify: Any
    screen_stack: Any
    picked: ModelEntry | None
    plan_picked: Any
    download_cancel: threading.Event | None

    def action_download(self) -> None:
        entry = self.picked
        if entry is None or entry.preset is None:
            self.notify("Pick a preset (a model from the Hub) first.", title="Nothing to download")
            return
        if getattr(self, "download_cancel", None) is not None:
            self.notify("A download is running (escape cancels it).", title="Downloading")
            return
        cancel, ended = threading.Event(), threading.Event()
        self.download_cancel, self._download_ended = cancel, ended
        self.query_one("#download", DownloadBar).start(f"{entry.preset.ref}: starting…")
        self.download_model(entry, entry.preset.ref, cancel, ended)

    def action_cancel_download(self) -> None:
        """Escape, wherever the focus is (a priority binding): cancel the running download.

        With none running, or a dialog open, the key goes on to the focused widget (the
        filter closes, a dialog answers no) as if this binding were not there."""
        cancel = getattr(self, "download_cancel", None)
        if cancel is None or cancel.is_set() or len(self.screen_stack) > 1:
            raise SkipAction
        cancel.set()
        self.query_one("#download", DownloadBar).show_line("cancelling…", "yellow")

    def stop_download(self) -> None:
        """Cancel a running download and wait for its worker (on unmount: quitting)."""
        cancel = getattr(self, "download_cancel", None)
        if cancel is None:
            return
        cancel.set()
        self._download_ended.wait(STOP_WAIT_S)

    @work(thread=True, exclusive=True, group="download", exit_on_error=False)
    def download_model(
        self, entry: ModelEntry, ref: str, cancel: threading.Event, ended: threading.Event
    ) -> None:
        seen: dict[str, Any] = {"last": None, "fetching": False}

        def progress(p: Any) -> None:
            if p.state == "downloading":
                seen["fetching"] = True
                if cancel.is_set() and p.file_done < p.file_total:
                    seen["last"] = p  # its bytes are on disk: the partial file keeps them
                    raise backend.DownloadCancelled
            self._send(DownloadProgress(p))

        try:
            path = backend.download(ref, progress)
        except backend.DownloadCancelled:
            last = seen["last"]
            self._send(DownloadEnded(entry.key, cancelled=True, kept=last.done, total=last.total))
        except HomelabError as error:
            self._send(DownloadEnded(entry.key, error=error))
        else:
            self._send(DownloadEnded(entry.key, path=path, fetched=seen["fetching"]))
        finally:
            ended.set()

    def _send(self, message: Any) -> None:
        """Post from the worker's thread; an app whose loop already closed just drops it."""
        try:
            self.post_message(message)
        except RuntimeError:
            pass

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
        else:
            bar.show_done(message.path, verified=message.fetched)
            if self.picked is not None and self.picked.key == message.key:
                self.plan_picked(self.picked)  # now from the cache
