"""The offline line: what does not work while the Hub cannot be reached, and why."""

from __future__ import annotations

from urllib.parse import urlsplit

from rich.text import Text
from textual.widgets import Static


class OfflineBanner(Static):
    """One line above the footer, shown only while the Hub is known to be unreachable."""

    DEFAULT_CSS = """
    OfflineBanner {
        display: none; height: auto; max-height: 2;
        background: $warning 20%; padding: 0 1;
    }
    """

    def show_offline(self, endpoint: str, reason: str) -> None:
        self.display = True
        self.update(offline_text(endpoint, reason))

    def show_online(self) -> None:
        self.display = False
        self.update("")


def offline_text(endpoint: str, reason: str) -> Text:
    """``offline: header reads and downloads need huggingface.co; ...`` and the reason."""
    host = urlsplit(endpoint).netloc or endpoint
    text = Text("offline: ", style="bold yellow")
    text.append(
        f"header reads and downloads need {host}; local models, the presets' own facts "
        "and the engine work without it"
    )
    text.append(f"\n{reason}", style="dim")
    return text
