"""First run: no llama-server found, and getting one without leaving the app.

A mixin of :class:`homelab.ui.app.HomelabApp`. When the engine check at start finds no
llama-server (:class:`~homelab.ui.messages.EngineMissing`; the server panel says where it
looked), or finds one without a GPU backend on a machine with a card, the engine-setup
panel offers three ways, by key and in the command palette:

- ``f`` fetches llama.cpp's official prebuilt release for the card's driver (``homelab
  engine fetch``: seconds, so offered first), with the build's panel, progress and cancel.
- ``b`` builds it, once the person said yes (it takes minutes): ``homelab engine build``
  in a thread worker, its lines and progress in the panel; escape cancels it at its next
  line (raised from the progress callback, so the domain's build stops and keeps what it
  built for the next try; a wait for another build's lock asks the callback again every
  fraction of a second, so it stops at once too); an error is shown as its title,
  message and hint. Already built, it returns at once.
- ``e`` asks for the path of one the user has; it is checked (exists, executable, answers
  like llama.cpp's llama-server), kept in the TUI settings (``llama_server`` in
  ``ui.toml``) and handed to the domain's locate rules, so ``s`` runs it at once and the
  next start finds it.

With an engine there, ``b``, ``f`` and ``e`` leave the footer and say so when pressed.
While the panel is up and no build runs, the app looks for an engine again every
:data:`ENGINE_LOOK_S` (a build in another terminal, or the one this app's cancelled build
waited for, finished): once one is there the panel goes.

The saved binary is handed to the domain when the app is made and forgotten again when it
unmounts (a process running several apps, as the tests do, carries none into the next).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from textual import work
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Input

from homelab.engine.llamacpp.backend import NoGpuBackend
from homelab.engine.llamacpp.locate import (
    ENV_VAR,
    check_llama_server,
    configure_llama_server,
    locate_llama_server,
)
from homelab.errors import EngineError, HomelabError
from homelab.ui.flow import AppFlow
from homelab.ui.messages import EngineMissing, while_mounted
from homelab.ui.screens import ConfirmScreen, EnginePathScreen
from homelab.ui.settings import llama_server_setting, save_llama_server, saved_llama_server
from homelab.ui.widgets.engine_setup import EngineSetupPanel

CHOSEN = "the llama-server path (e)"
"""How errors name the path typed into the dialog (before it is saved)."""
SETUP_ACTIONS = ("fetch_engine", "build_engine", "choose_engine")
ENGINE_LOOK_S = 2.0
"""How often the app looks for a llama-server again while it has none (and refreshes)."""


class BuildCancelled(Exception):
    """Raised from the build's progress callback to stop it (escape)."""


@dataclass
class BuildLine(Message, bubble=False):
    """One progress line of the build: how far (0..1, or None when the line does not say)."""

    fraction: float | None
    line: str


@dataclass
class EngineFound(Message, bubble=False):
    """There is a llama-server now: where, which locate rule found it, and how it came."""

    path: Path
    origin: str
    how: str


@dataclass
class EngineSetupFailed(Message, bubble=False):
    """The build or the chosen binary did not give an engine (None: the build was cancelled)."""

    error: HomelabError | None


class EngineSetupFlow(AppFlow):
    """The ``b`` / ``e`` keys, their workers and the engine-setup panel."""

    def _engine_setup_init(self) -> None:
        self.build_cancel: threading.Event | None = None
        self.engine_path_tried = ""
        self.engine_setup_error: HomelabError | None = None
        self.engine_origin: str | None = None
        try:
            saved = saved_llama_server()
        except HomelabError as error:  # a bad file: said on screen, the rules go on without it
            saved, self.engine_setup_error = None, error
        configure_llama_server(saved, setting=llama_server_setting())
        self.engine_look_timer: Timer | None = None

    # -- keys ------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``b`` and ``e`` are on offer (footer) while there is no engine (with one, their
        keys say so: ``engine_there``); escape cancels a build only while one runs, and not
        from a field (there it leaves the field) nor a dialog (there it closes the dialog)."""
        if action in SETUP_ACTIONS:
            return self.state.engine_problem is not None or self.build_cancel is not None
        if action == "cancel_build":
            typing = isinstance(self.focused, Input)
            return self.build_cancel is not None and len(self.screen_stack) == 1 and not typing
        return super().check_action(action, parameters)

    def action_engine_there(self) -> None:
        """``b``, ``f`` or ``e`` while an engine is there: why they do nothing."""
        self.notify(
            "There is a llama-server already (`homelab engine path` says which); "
            "`homelab engine build --force` builds it again.",
            title="Engine there",
        )

    def action_build_engine(self, fetch: bool = False) -> None:
        if self.build_cancel is not None:
            self.notify("A build is running (escape cancels it).", title="Building")
            return
        if fetch:
            self._start_build(fetch=True)
            return

        def answered(yes: bool | None) -> None:
            if yes and self.build_cancel is None:
                self._start_build(fetch=False)

        question = (
            "Build llama-server here? It compiles llama.cpp: minutes, the CPU busy "
            "(escape cancels; what was built is kept). f fetches the prebuilt one in seconds."
        )
        self.push_screen(ConfirmScreen(question, yes="Build"), answered)

    def _start_build(self, fetch: bool) -> None:
        self.build_cancel = threading.Event()
        self.query_one("#engine-setup", EngineSetupPanel).show_building(fetch)
        self.refresh_bindings()
        self.build_engine(self.build_cancel, fetch)

    def action_fetch_engine(self) -> None:
        self.action_build_engine(fetch=True)

    def action_cancel_build(self) -> None:
        if self.build_cancel is not None:
            self.build_cancel.set()
            self.query_one("#engine-setup", EngineSetupPanel).show_progress(
                None, "cancelling: the build stops at its next line"
            )

    def action_choose_engine(self) -> None:
        def answered(value: str | None) -> None:
            if value:
                self.engine_path_tried = value
                self.query_one("#engine-setup", EngineSetupPanel).show_checking(value)
                self.use_chosen_engine(value)

        self.push_screen(EnginePathScreen(self.engine_path_tried), answered)

    # -- workers ---------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="engine-build", exit_on_error=False)
    def build_engine(self, cancel: threading.Event, fetch: bool = False) -> None:
        def progress(fraction: float | None, line: str) -> None:
            if cancel.is_set():
                raise BuildCancelled
            self.post_message(BuildLine(fraction, line))

        from homelab.engine.llamacpp.build import build_llama_server
        from homelab.engine.llamacpp.release import fetch_release

        card = self.state.card.report  # the card the app reads (a replay stands for the driver)
        try:
            if fetch:
                built = fetch_release(
                    cuda_driver=None if card is None else card.cuda_driver,
                    has_card=card is not None and bool(card.devices),
                    progress=progress,
                )
            else:
                built = build_llama_server(progress=progress, card=card)
            located = locate_llama_server()
        except BuildCancelled:
            self.look_for_engine(cancelled=True)
        except HomelabError as error:
            self.post_message(EngineSetupFailed(error))
        else:
            verb = "fetched" if fetch else "built"
            how = verb if built == located.path else f"{verb} {built}, but {located.origin} wins"
            self.post_message(EngineFound(located.path, located.origin, how))

    @work(thread=True, exclusive=True, group="engine-choose", exit_on_error=False)
    def use_chosen_engine(self, text: str) -> None:
        path = Path(text).expanduser().absolute()
        try:
            tag = check_llama_server(path, setting=CHOSEN).tag
            save_llama_server(path)
            configure_llama_server(path, setting=llama_server_setting())
            found = locate_llama_server()
            if found.origin != "setting":  # the environment variable wins over any setting
                raise EngineError(
                    f"{ENV_VAR} is set and wins over {path} (kept for the next start): "
                    f"homelab runs {found.path}",
                    hint=f"unset {ENV_VAR} to run the chosen llama-server",
                    title="Overridden",
                )
        except HomelabError as error:
            self.post_message(EngineSetupFailed(error))
            return
        how = f"llama.cpp {tag}, kept in the settings"
        self.post_message(EngineFound(found.path, found.origin, how))

    def _look_again(self) -> None:
        """The timer's: while the panel says there is no engine and no build runs."""
        problem = self.state.engine_problem
        if problem is None or isinstance(problem, NoGpuBackend) or self.build_cancel is not None:
            return
        self.run_worker(
            partial(self.look_for_engine, cancelled=False),
            thread=True,
            exclusive=True,
            group="engine-look",
            exit_on_error=False,
        )

    def look_for_engine(self, cancelled: bool) -> None:
        """On a worker thread: an engine there now is found (the panel goes); none: after a
        cancelled build, the panel says it was cancelled; otherwise nothing changes."""
        try:
            located = locate_llama_server()
        except HomelabError:
            if cancelled:
                self.post_from_thread(EngineSetupFailed(None))
            return
        self.post_from_thread(EngineFound(located.path, located.origin, f"found: {located.origin}"))

    # -- what they tell the app ------------------------------------------------------------

    @while_mounted
    def on_mount(self) -> None:
        if self.engine_setup_error is not None:
            self.query_one("#engine-setup", EngineSetupPanel).show_error(self.engine_setup_error)
        if self.state.args.refresh_s > 0:
            self.engine_look_timer = self.set_interval(ENGINE_LOOK_S, self._look_again)

    @while_mounted
    def on_unmount(self) -> None:
        if self.build_cancel is not None:
            self.build_cancel.set()
        configure_llama_server(None, setting="")

    @while_mounted
    def on_engine_missing(self, message: EngineMissing) -> None:
        panel = self.query_one("#engine-setup", EngineSetupPanel)
        if self.engine_setup_error is not None:  # the settings file's trouble stays in view
            panel.show_error(self.engine_setup_error)
        elif isinstance(message.error, NoGpuBackend):  # an engine, but the CPU's: the red line
            panel.show_error(message.error)
        else:
            panel.show_missing()
        self.refresh_bindings()

    @while_mounted
    def on_build_line(self, message: BuildLine) -> None:
        self.query_one("#engine-setup", EngineSetupPanel).show_progress(
            message.fraction, message.line
        )

    @while_mounted
    def on_engine_found(self, message: EngineFound) -> None:
        self.build_cancel = None
        self.state.engine_problem = None
        self.engine_setup_error = None
        self.engine_origin = message.origin
        self.query_one("#engine-setup", EngineSetupPanel).hide()
        self.refresh_bindings()
        self._show_engine()
        self.check_engine()  # what it computes on, for the server panel
        self.notify(f"{message.path} ({message.how}); s starts the picked model.", title="Engine")

    @while_mounted
    def on_engine_setup_failed(self, message: EngineSetupFailed) -> None:
        self.build_cancel = None
        panel = self.query_one("#engine-setup", EngineSetupPanel)
        self.engine_setup_error = message.error
        if message.error is None:
            panel.show_cancelled()
        else:
            panel.show_error(message.error)
            self.notify(message.error.message.splitlines()[0], title=message.error.title)
        self.refresh_bindings()
