"""The models menu and the plan panel's side of the app: list, judge, pick, plan.

A mixin of :class:`homelab.ui.app.HomelabApp` (kept apart so each module holds one
concern); every domain call runs in a thread worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.worker import get_current_worker

from homelab.errors import HomelabError, ModelFileError, UsageError
from homelab.plan.workload import AGENT
from homelab.ui import backend
from homelab.ui.catalog import (
    Judgement,
    ModelEntry,
    Source,
    judgement_of_fit,
)
from homelab.ui.flow import AppFlow
from homelab.ui.messages import (
    EngineFailed,
    ModelJudged,
    ModelsListed,
    PlanFailed,
    PlanMade,
    while_mounted,
)
from homelab.ui.state import Preview
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.plan import DEFAULT_VALUES, PlanPanel

if TYPE_CHECKING:
    from homelab.gguf.header import GgufModel
    from homelab.gpu.report import GpuReport
    from homelab.plan.options import PlanOptions


NEXT_PICK = ""
"""The row key of fields edited before any row was picked (:meth:`ModelsFlow._take_pending`)."""


class ModelsFlow(AppFlow):
    """List the models, judge each on the card, plan the picked one."""

    def _models_init(self) -> None:
        self._headers: dict[Path, tuple[tuple[int, int], GgufModel]] = {}
        """Headers read so far, with the file's (mtime, size) then: a row judged, then
        planned, is read once; a file replaced under the same name is read again."""
        self._listed_once = False

    def action_rescan(self) -> None:
        """``m``: the models folders and the HF cache listed again (a GGUF copied or
        downloaded meanwhile shows without a restart); new rows are judged, the others keep
        their verdicts, rows whose file is gone go."""
        self.query_one("#menu", ModelsMenu).border_subtitle = "rescanning…"
        self.list_models(asked=True)

    def on_app_focus(self) -> None:
        """The terminal's focus is back (a person who was copying a model in): rescan."""
        if self._listed_once:
            self.list_models()

    # -- models ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="models", exit_on_error=False)
    def list_models(self, asked: bool = False) -> None:
        from homelab.engine.kinds import engine_kind
        from homelab.gguf.file_name import quant_tag
        from homelab.hub.presets import load_presets

        entries: list[ModelEntry] = []
        try:
            presets = load_presets()
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            presets = []
        for preset in presets:
            if engine_kind(preset.engine).loads_gguf:  # the menu lists and previews GGUFs only
                entries.append(
                    ModelEntry(
                        f"preset:{preset.key}", preset.key, preset.quant, "preset", preset=preset
                    )
                )
        found: tuple[tuple[Source, list[Path]], ...] = (
            ("cache", backend.cached_ggufs()),
            ("dir", backend.local_ggufs(self.state.args.models_dirs)),
        )
        for source, paths in found:
            for path in paths:
                entries.append(
                    ModelEntry(
                        str(path),
                        model_name(path, source),
                        quant_tag(path.name),
                        source,
                        path=path,
                        size=_size(path),
                    )
                )
        self.post_message(ModelsListed(entries, asked))

    @while_mounted
    def on_models_listed(self, message: ModelsListed) -> None:
        menu = self.query_one("#menu", ModelsMenu)
        before = {e.key for e in menu.entries}
        menu.set_entries(message.entries)
        now = {e.key for e in message.entries}
        menu.forget(before - now)
        fresh = [e for e in message.entries if e.key not in menu.judgements]
        if self.state.card.report is not None and fresh:
            self.judge_models(fresh)
        if self._listed_once and (message.asked or now != before):
            new, gone = len(now - before), len(before - now)
            said = f"{len(now)} models: {new} new, {gone} gone" if new or gone else "no change"
            self.notify(said, title="Models rescanned")
        self._listed_once = True

    @work(thread=True, exclusive=True, group="verdicts", exit_on_error=False)
    def judge_models(self, entries: list[ModelEntry]) -> None:
        """Presets from their own facts first (instant, offline), then every row for real."""
        worker = get_current_worker()
        report = self.state.card.report
        if report is None:  # asked for once the card has been read
            return
        judged = []
        for entry in entries:  # each row with its own fields: an edit is that row's alone
            values = dict(self._row_values(entry))
            try:
                judged.append((entry, values, self.plan_options(values)))
            except (UsageError, ValueError):
                continue  # the picked row's field is bad: its plan panel says so
        for entry, values, options in judged:
            if worker.is_cancelled:
                return
            if entry.preset is not None:
                fit = backend.judge_preset_from_facts(entry.preset, report, options)
                said = judgement_of_fit(fit.fit, fit.source)
                self.post_message(ModelJudged(entry.key, said, values))
        for entry, values, options in judged:
            if worker.is_cancelled:
                return
            said = self._judge(entry, report, options)
            self.post_message(ModelJudged(entry.key, said, values))

    def _row_values(self, entry: ModelEntry) -> dict[str, str]:
        return self.state.row_settings.get(entry.key, DEFAULT_VALUES)

    def _take_pending(self, entry: ModelEntry) -> None:
        """Fields typed before anything was picked belong to the first row picked (unless
        that row has edits of its own)."""
        pending = self.state.row_settings.pop(NEXT_PICK, None)
        if pending is not None and entry.key not in self.state.row_settings:
            self.state.row_settings[entry.key] = pending

    def _judge(self, entry: ModelEntry, report: GpuReport, options: PlanOptions) -> Judgement:
        if entry.preset is not None:
            preset_fit = backend.judge_preset_seeing_hub(
                entry.preset, report, options, self.hub_seen
            )
            return judgement_of_fit(preset_fit.fit, preset_fit.source)
        model: GgufModel | HomelabError
        try:
            if entry.path is None:  # only presets come without a path
                raise ModelFileError(f"{entry.name} has no file to read")
            model = self._header(entry.path)
        except HomelabError as error:
            model = error
        fit = backend.judge_model(model, entry.name, report, options)
        return judgement_of_fit(fit)

    def _header(self, path: Path) -> GgufModel:
        """The model's header (``ModelFileError`` when it is not a model llama.cpp loads)."""
        from homelab.gguf.model_file import read_model

        seen = _seen(path)
        cached = self._headers.get(path)
        if cached is not None and cached[0] == seen:
            return cached[1]
        header = read_model(path)
        self._headers[path] = (seen, header)
        return header

    @while_mounted
    def on_model_judged(self, message: ModelJudged) -> None:
        if message.values != self.state.row_settings.get(message.key, DEFAULT_VALUES):
            return  # judged with fields edited since: the edit's own verdict follows
        self.query_one("#menu", ModelsMenu).set_judgement(message.key, message.judgement)

    # -- the plan --------------------------------------------------------------------------

    @while_mounted
    def on_models_menu_picked(self, message: ModelsMenu.Picked) -> None:
        self.pick(message.entry)

    def pick(self, entry: ModelEntry) -> None:
        self._take_pending(entry)
        self.state.picked.entry = entry
        panel = self.query_one("#plan", PlanPanel)
        default = entry.preset.workload.name if entry.preset is not None else AGENT.name
        panel.set_values(self._row_values(entry), default)  # this row's fields, not the last's
        panel.show_planning(entry.name)
        self.plan_picked(entry)

    @while_mounted
    def on_plan_panel_settings_changed(self, message: PlanPanel.SettingsChanged) -> None:
        entry = self.state.picked.entry
        key = NEXT_PICK if entry is None else entry.key  # nothing picked: the next pick's
        if message.values == DEFAULT_VALUES:
            self.state.row_settings.pop(key, None)
        else:
            self.state.row_settings[key] = dict(message.values)
        if entry is not None:
            self._replan_row(entry)

    def action_reset_settings(self) -> None:
        """``z``: the picked row's fields back to its defaults (its edits dropped)."""
        entry = self.state.picked.entry
        if entry is None or entry.key not in self.state.row_settings:
            self.notify("Nothing edited on this row.", title="Reset")
            return
        del self.state.row_settings[entry.key]
        self.pick(entry)
        self._replan_row(entry, plan=False)
        self.notify(f"{entry.name}: settings reset", title="Reset")

    def _replan_row(self, entry: ModelEntry, *, plan: bool = True) -> None:
        """The row's verdict judged again with its fields (the other rows keep theirs)."""
        menu = self.query_one("#menu", ModelsMenu)
        if self.state.card.report is not None and any(e.key == entry.key for e in menu.entries):
            menu.forget({entry.key})
            self.judge_row(entry)
        if plan:
            self.plan_picked(entry)

    @work(thread=True, exclusive=True, group="row-verdict", exit_on_error=False)
    def judge_row(self, entry: ModelEntry) -> None:
        """One row judged again (an edit of its fields), beside the menu's own judging."""
        report = self.state.card.report
        values = dict(self._row_values(entry))
        try:
            options = self.plan_options(values)
        except (UsageError, ValueError):
            return
        if report is not None:
            self.post_message(ModelJudged(entry.key, self._judge(entry, report, options), values))

    @work(thread=True, exclusive=True, group="plan", exit_on_error=False)
    def plan_picked(self, entry: ModelEntry) -> None:
        from homelab.plan.card import card_for

        try:
            options = self.plan_options()
            report = self.state.card.report or card_for(self.card_options())
            path = entry.path
            if entry.preset is not None:
                path = backend.preset_model_path(entry.preset)
            if path is not None:
                preset = entry.preset
                default = preset.workload if preset is not None else None
                key = preset.key if preset is not None else None
                prepared = backend.prepare(str(path), report, options, default, served_name=key)
                plan, argv = prepared.plan.plan, list(prepared.argv)
                preview = Preview(prepared, report, options)
                if prepared.plan.model is not None:  # the header prepare read: not read again
                    self._headers[path] = (_seen(path), prepared.plan.model)
            else:
                assert entry.preset is not None  # only presets come without a path
                plan, argv = backend.plan_not_downloaded(entry.preset, report, options)
                preview = None
            measured: tuple[str, ...] = ()
            if path is not None:  # a stored bench: its lines, its decode rate in the working
                plan, measured = backend.measured(plan, self._header(path))
        except HomelabError as error:
            self.post_message(PlanFailed(entry.key, error))
            return
        except ValueError as error:
            self.post_message(PlanFailed(entry.key, UsageError(str(error))))
            return
        self.post_message(PlanMade(entry.key, plan, argv, path, measured, preview))

    @while_mounted
    def on_plan_made(self, message: PlanMade) -> None:
        picked, running = self.state.picked, self.state.running.entry
        if picked.entry is None or message.key != picked.entry.key:
            return
        picked.plan, picked.argv, picked.model_path = message.plan, message.argv, message.model_path
        picked.preview = message.preview
        note = None
        if running is not None and running.key != message.key:
            note = (
                f"{running.name} runs now: planned as if it were stopped (its memory "
                "counts as freed); s switches to this plan (it is stopped first)."
            )
        panel = self.query_one("#plan", PlanPanel)
        panel.show_plan(picked.entry.name, message.plan, picked.argv, note, message.measured)
        self._show_card()

    @while_mounted
    def on_plan_failed(self, message: PlanFailed) -> None:
        picked = self.state.picked
        if picked.entry is None or message.key != picked.entry.key:
            return
        picked.plan, picked.argv, picked.model_path, picked.preview = None, [], None, None
        self.query_one("#plan", PlanPanel).show_error(picked.entry.name, message.error)
        self._show_card()


def model_name(path: Path, source: str) -> str:
    if source == "cache":
        for part in path.parts:
            if part.startswith("models--"):
                return part.removeprefix("models--").replace("--", "/", 1).split("/")[-1]
    return path.stem


def _seen(path: Path) -> tuple[int, int]:
    """The file's (mtime, size) as a header read from it was: another pair, another file."""
    try:
        stat = path.stat()
    except OSError:
        return (0, 0)  # read_model says what is wrong with it
    return (stat.st_mtime_ns, stat.st_size)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
