"""The narrow layout's pages: under :data:`NARROW_BELOW` columns the screen is one column and
shows one page at a time (models, plan, card, server), picked by these tabs or by the
keys 1 to 4 their labels name; the
:class:`StatusLine` under them keeps the engine's state and URL in view on every page.

Above it both are hidden and every panel is on screen (two columns). A page is a class on
the screen (``page-models`` ...), which ``homelab.tcss`` turns into which panels show. The
page follows the focus: a key that focuses a panel on another page (``/``, ``l``, a plan
field) brings that page up, so a focused widget is never out of sight.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget
from textual.widgets import Static, Tab, Tabs

NARROW_BELOW = 120
"""Columns under which the screen is one column of pages (``App.HORIZONTAL_BREAKPOINTS``)."""
PAGES = ("models", "plan", "card", "server")
FOCUS_ON = {"models": "#models", "server": "#log"}
"""What a page key focuses: the models table, the log (arrows scroll it). The plan and the
card are read, not typed into: their keys focus no field, so every hotkey still acts (a
plan field is focused with tab, or by clicking it)."""
PAGE_OF = {
    "menu": "models",
    "plan": "plan",
    "card-page": "card",
    "engine": "server",
}
"""The page each top-level panel (or group of panels, by id) is on."""


def page_of(widget: Widget | None) -> str | None:
    """The page ``widget`` is on (None: on none, e.g. the tabs themselves or a dialog)."""
    node = widget
    while node is not None:
        if node.id in PAGE_OF:
            return PAGE_OF[node.id]
        node = node.parent if isinstance(node.parent, Widget) else None
    return None


class PageTabs(Tabs):
    """The tabs over the narrow layout; the active one is the page on show (one row: the
    active tab is marked by its colours, not by the underline under them)."""

    DEFAULT_CSS = """
    PageTabs { height: 1; }
    PageTabs Underline { display: none; }
    PageTabs Tab.-active { background: $primary; color: $text; text-style: bold; }
    """

    def __init__(self, **kwargs) -> None:
        tabs = (Tab(f"{n} {page}", id=f"tab-{page}") for n, page in enumerate(PAGES, 1))
        super().__init__(*tabs, **kwargs)

    def on_mount(self) -> None:
        self.watch(self.screen, "focused", self._follow_focus)
        self._show("models")

    @property
    def page(self) -> str:
        return (self.active or "tab-models").removeprefix("tab-")

    def show_page(self, page: str) -> None:
        """Bring ``page`` up (a no-op when it is up already)."""
        if page != self.page:
            self.active = f"tab-{page}"
        self._show(page)

    def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        event.stop()
        if event.tab is not None and event.tab.id:
            self._show(event.tab.id.removeprefix("tab-"))

    def _show(self, page: str) -> None:
        self.screen.update_classes({f"page-{p}": p == page for p in PAGES})

    def _follow_focus(self, focused: Widget | None) -> None:
        page = page_of(focused)
        if page is not None:
            self.show_page(page)


class StatusLine(Static):
    """One line, the engine's state and URL (shown in the narrow layout only)."""

    DEFAULT_CSS = "StatusLine { height: 1; padding: 0 1; }"


def status_text(state: str | None, url: str | None, model: str | None, style: str) -> Text:
    """``ready  URL http://127.0.0.1:8080  SmolLM2`` (the URL before the model: a long
    model name is what is cut), or that no engine runs."""
    if state is None:
        return Text("no engine running  (s starts the picked model)", style="dim")
    text = Text(state, style=style)
    text.append("  URL ")
    text.append(url or "—", style="bold" if url else "dim")
    if model:
        text.append(f"  {model}")
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text
