"""The plan panel: the settings (workload, cache type, context, slots), the verdict in a
line (what fits, and what stays off the card: experts in RAM, layers on the CPU), the working step by
step, the warnings, what a stored bench measured at these flags, and the exact
llama-server command line.

Editing a setting posts :class:`PlanPanel.SettingsChanged` at once; the app re-plans.
Enter or escape in a setting hands the keys back to the models menu (in the cache menu,
enter opens it and escape leaves it). No letter typed in a setting is an app hotkey.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, Select, Static

from homelab.plan.working import render_step
from homelab.ui.catalog import plan_words

if TYPE_CHECKING:
    from homelab.errors import HomelabError
    from homelab.plan.planner import Plan

CACHE_CHOICES = ("auto", "q8_0", "f16", "q4_0")
"""The cache menu: ``auto`` asks for nothing (the planner's choice: q8_0 on a card, on the CPU
the fastest setting RAM allows, as ``homelab plan`` without ``--cache-type``)."""
AUTO_CACHE = CACHE_CHOICES[0]
DEFAULT_VALUES = {"workload": "", "cache": AUTO_CACHE, "ctx": "", "slots": ""}
"""The fields as nothing was edited: the row's own default workload, the planner's choices."""
VERDICT_STYLE = {"fits": "green", "partial": "yellow", "does_not_fit": "red"}


class CacheSelect(Select[str]):
    """The cache menu: closed and focused, it keeps letters (and any printable key) from
    the app's hotkeys, as a field does, so ``s`` or ``b`` there starts nothing; enter,
    space and the arrows still open it, and escape goes on to the panel (back to the
    models menu)."""

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return character is not None and character.isprintable()

    async def _on_key(self, event: events.Key) -> None:
        """A printable key the menu has no binding of its own for (space opens it) ends
        here: the app's bindings are checked only for a key that bubbles up to it."""
        if event.is_printable and event.key not in self._bindings.key_to_bindings:
            event.stop()
            event.prevent_default()
            return
        await super()._on_key(event)


class PlanPanel(Vertical):
    DEFAULT_CSS = """
    PlanPanel { border: round $primary; padding: 0 1; height: 3fr; }
    PlanPanel #settings { height: 1; margin-bottom: 1; }
    PlanPanel #settings Label { padding: 0 1 0 0; }
    PlanPanel #settings Input { width: 10; margin-right: 2; }
    PlanPanel #settings Select { width: 12; margin-right: 2; }
    PlanPanel #working { height: 1fr; }
    PlanPanel #argv { margin-top: 1; }
    """

    BINDINGS = [Binding("escape", "done", "back to the models", show=False)]

    class SettingsChanged(Message):
        """The raw field values: workload, cache type, ctx and slots (text, '' = auto)."""

        def __init__(self, values: dict[str, str]) -> None:
            super().__init__()
            self.values = values

    def __init__(self, *, blink: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._blink = blink

    def compose(self) -> ComposeResult:
        with Horizontal(id="settings"):
            yield Label("workload")
            yield Input(placeholder="agent", id="workload", compact=True)
            yield Label("cache")
            yield CacheSelect(
                [(t, t) for t in CACHE_CHOICES],
                value=AUTO_CACHE,
                allow_blank=False,
                id="cache",
                compact=True,
            )
            yield Label("ctx")
            yield Input(placeholder="auto", id="ctx", type="integer", compact=True)
            yield Label("slots")
            yield Input(placeholder="auto", id="slots", type="integer", compact=True)
        with VerticalScroll(id="working"):
            yield Static("Pick a model (enter) to see its plan.", id="steps")
            yield Static("", id="argv")

    def on_mount(self) -> None:
        self.border_title = "plan"
        for field in self.query(Input):
            field.cursor_blink = self._blink

    def values(self) -> dict[str, str]:
        return {
            "workload": self.query_one("#workload", Input).value.strip(),
            "cache": str(self.query_one("#cache", Select).value),
            "ctx": self.query_one("#ctx", Input).value.strip(),
            "slots": self.query_one("#slots", Input).value.strip(),
        }

    def set_values(self, values: dict[str, str], workload: str) -> None:
        """The picked row's fields (its own edits, or the defaults), set without posting
        :class:`SettingsChanged`; ``workload``: what the row plans for when the field is
        empty (a preset's own workload, else "agent"), shown as the field's placeholder."""
        with self.prevent(Input.Changed, Select.Changed):
            self.query_one("#workload", Input).value = values["workload"]
            self.query_one("#workload", Input).placeholder = workload
            self.query_one("#cache", Select).value = values["cache"]
            self.query_one("#ctx", Input).value = values["ctx"]
            self.query_one("#slots", Input).value = values["slots"]

    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self, event: Message) -> None:
        event.stop()
        self.post_message(self.SettingsChanged(self.values()))

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        """Enter in a setting: done editing, back to the models menu."""
        event.stop()
        self.action_done()

    def action_done(self) -> None:
        """Enter or escape in a setting (the value stays as typed): back to the models menu."""
        self.app.query_one("#models").focus()

    def show_planning(self, name: str) -> None:
        self.border_subtitle = name
        self.query_one("#steps", Static).update(Text(f"planning {name}…", style="dim italic"))
        self.query_one("#argv", Static).update("")

    def show_plan(
        self,
        name: str,
        plan: Plan,
        argv: list[str],
        note: str | None,
        measured: tuple[str, ...] = (),
    ) -> None:
        self.border_subtitle = name
        text = Text()
        if note:
            text.append(note + "\n", style="italic yellow")
        text.append(plan_words(plan)[0] + "\n", style=f"bold {VERDICT_STYLE[plan.verdict]}")
        for step in plan.steps:  # structured rows: headings bold, figures as the domain words them
            text.append(render_step(step) + "\n", style="" if step.formula else "bold")
        for warning in plan.warnings:
            text.append("! " + warning + "\n", style="yellow")
        for line in measured:  # a stored `homelab bench` of these flags: compute's answer
            text.append(line + "\n", style="cyan" if "measured:" in line else "dim")
        self.query_one("#steps", Static).update(text)
        command = Text("$ ", style="bold")
        command.append(shlex.join(argv), style="bold green")
        self.query_one("#argv", Static).update(command)

    def show_error(self, name: str, error: HomelabError) -> None:
        self.border_subtitle = name
        text = Text(f"{error.title}\n", style="bold red")
        text.append(error.message + "\n")
        if error.hint:
            text.append(error.hint, style="italic")
        self.query_one("#steps", Static).update(text)
        self.query_one("#argv", Static).update("")
