"""The download key: pull the picked preset into the HF cache, with progress; escape cancels.

A mixin of :class:`homelab.ui.app.HomelabApp`. The pull runs in a thread worker; raising
from its progress callback stops it and keeps the partial file, so the next ``d`` resumes.
"""

from __future__ import annotations

import threading
from typing import Any

from textual import work

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.catalog import ModelEntry
from homelab.ui.messages import DownloadEnded, DownloadProgress, while_mounted
from homelab.ui.widgets.download import DownloadBar


class DownloadFlow:
    """One download at a time, of the picked preset's quant."""

    query_one: Any
    post_message: Any
    notify: Any
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
        self.download_cancel = threading.Event()
        self.query_one("#download", DownloadBar).show_line(f"{entry.preset.ref}: starting…")
        self.download_model(entry, entry.preset.ref, self.download_cancel)

    def action_cancel_download(self) -> None:
        cancel = getattr(self, "download_cancel", None)
        if cancel is not None:
            cancel.set()

    @work(thread=True, exclusive=True, group="download", exit_on_error=False)
    def download_model(self, entry: ModelEntry, ref: str, cancel: threading.Event) -> None:
        def progress(p: Any) -> None:
            if cancel.is_set() and p.file_done > 0:  # keep what came: the next d resumes
                raise backend.DownloadCancelled
            self.post_message(DownloadProgress(p))

        try:
            path = backend.download(ref, progress)
        except backend.DownloadCancelled:
            self.post_message(DownloadEnded(entry.key, cancelled=True))
        except HomelabError as error:
            self.post_message(DownloadEnded(entry.key, error=error))
        else:
            self.post_message(DownloadEnded(entry.key, path=path))

    @while_mounted
    def on_download_progress(self, message: DownloadProgress) -> None:
        self.query_one("#download", DownloadBar).show_progress(message.progress)

    @while_mounted
    def on_download_ended(self, message: DownloadEnded) -> None:
        self.download_cancel = None
        bar = self.query_one("#download", DownloadBar)
        if message.cancelled:
            bar.show_line("download cancelled: d resumes it", "yellow")
        elif message.error is not None:
            bar.show_line(f"{message.error.title}: {message.error.message}", "red")
        else:
            bar.show_line(f"downloaded {message.path}", "green")
            if self.picked is not None and self.picked.key == message.key:
                self.plan_picked(self.picked)  # now from the cache
