"""The models list a person owns: ``models.toml``, the set of models homelab places together.

Each ``[[model]]`` names a model (a local ``.gguf``, a preset's name, or ``REPO:QUANT``), the
workload it serves (``agent``, ``chat``, ``fim``/``autocomplete`` or a token count), and
optionally the slots it gets, the ``id`` clients name it by (else the id it would be served
by alone) and the ``aliases`` clients send for it (``claude-haiku-*``: shell-style globs).
The order is the priority: the first listed is the most wanted when not all fit together.

The file is read before anything is priced, so everything that can be checked from the text
is checked here, naming the file and the key: not UTF-8, too large, not TOML, a key homelab
does not know, a value of the wrong type, two models with one id, an alias that would send a
request to two models. Ids derived from the models are known only once they are read; the
same name checks run again then (:func:`check_names`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homelab.errors import UsageError
from homelab.files import TomlTextError, read_toml
from homelab.plan.workload import FIM, Workload, parse_workload

MODELS_FILE = "models.toml"
MAX_FILE_BYTES = 256 * 1024
"""A list of models is a few lines each; a bigger file is not one."""
MAX_MODELS = 32
"""More models than this is not a set one machine swaps between."""
MAX_SLOTS = 8
"""A model of a set serves a few conversations at once; more belongs in its own serve."""
MAX_ALIASES = 32
MAX_NAME_CHARS = 128
ENTRY_KEYS = ("model", "workload", "slots", "id", "aliases")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ALIAS = re.compile(r"^[A-Za-z0-9*?][A-Za-z0-9._:/*?-]*$")


class ModelsFileError(UsageError):
    """The models list is unreadable or breaks its schema (exit code 2)."""

    title = "Invalid models list"


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model of the set, as the person listed it (nothing read or priced yet)."""

    model: str
    """A local ``.gguf`` path, a preset's name or a Hub ``REPO:QUANT`` reference."""
    workload: Workload | None
    """What it serves; None (a model given on the command line): the preset's, else an agent's."""
    slots: int | None = None
    """Conversations at once; None: :func:`set_slots` of the workload."""
    id: str | None = None
    """The id clients name it by; None: the id it is served by alone."""
    aliases: tuple[str, ...] = ()
    """Other names (globs) clients send for it."""


def set_slots(workload: Workload) -> int:
    """Slots a model of a set gets when its entry names none: two for autocomplete (an editor
    sends the next request before the last is answered), one for every other workload (a set
    shares the card, so each model holds one full conversation)."""
    return 2 if workload == FIM else 1


def default_models_file() -> Path:
    """``models.toml`` in homelab's config folder."""
    from homelab.paths import config_dir

    return config_dir() / MODELS_FILE


def load_models_file(path: Path) -> tuple[ModelEntry, ...]:
    """The models ``path`` lists, in its order, each field checked.

    Raises:
        ModelsFileError: the file cannot be read, is not UTF-8 TOML, is too large, has a key
            homelab does not know, a value of the wrong type, no model, two models with one
            id, or an alias two models answer to.
    """
    where = str(path)
    try:
        data = read_toml(path, MAX_FILE_BYTES, "a models list")
    except FileNotFoundError:
        raise ModelsFileError(
            f"{where}: cannot be read: there is no such file",
            hint='Write one: a [[model]] table per model, with model = "FILE.gguf, PRESET or '
            'REPO:QUANT" and workload = "agent", "chat" or "fim" (see docs/planning.md).',
        ) from None
    except OSError as error:  # a FIFO or device (never opened to block), too large
        raise ModelsFileError(
            f"{where}: cannot be read: {error.strerror or error}",
            hint=f"A models list is a TOML file, at most {MAX_FILE_BYTES // 1024} KiB.",
        ) from None
    except TomlTextError as problem:
        raise ModelsFileError(f"{where}: {problem}") from None
    return parse_models(data, where)


def parse_models(data: Mapping[str, Any], where: str) -> tuple[ModelEntry, ...]:
    """The entries of a parsed models list; ``where`` names it in errors.

    Raises:
        ModelsFileError: as :func:`load_models_file` says.
    """
    unknown = sorted(set(data) - {"model"})
    if unknown:
        raise ModelsFileError(
            f"{where}: unknown key {unknown[0]!r}",
            hint="A models list has only [[model]] entries.",
        )
    tables = data.get("model")
    if not isinstance(tables, list) or not tables:
        raise ModelsFileError(
            f"{where}: no [[model]] entry",
            hint='List each model as [[model]] with model = "..." and workload = "...".',
        )
    if len(tables) > MAX_MODELS:
        raise ModelsFileError(f"{where}: {len(tables)} models; a set holds at most {MAX_MODELS}")
    entries = tuple(_entry(table, f"{where}: model {n}") for n, table in enumerate(tables, 1))
    check_names([(e.id, e.aliases) for e in entries], where)
    return entries


def check_names(named: Sequence[tuple[str | None, tuple[str, ...]]], where: str) -> None:
    """Every request's ``model`` must reach one model: no id twice, no alias twice, no alias
    that matches another model's id or alias (globs are checked against each other's text and
    a sample name each matches). ``named``: (id or None, aliases) per model, in list order.

    Raises:
        ModelsFileError: two models answer to one name.
    """
    owner: dict[str, int] = {}
    for n, (ident, _) in enumerate(named, 1):
        if ident is None:
            continue
        key = ident.lower()
        if key in owner:
            raise ModelsFileError(
                f"{where}: models {owner[key]} and {n} both have the id {ident!r}",
                hint="Give each model its own id (the id key).",
            )
        owner[key] = n
    patterns: list[tuple[int, str]] = []
    for n, (_, aliases) in enumerate(named, 1):
        for alias in aliases:
            for other_n, name in [*((m, i) for i, m in owner.items()), *patterns]:
                if other_n != n and _overlap(alias, name):
                    raise ModelsFileError(
                        f"{where}: the alias {alias!r} of model {n} also matches {name!r} of "
                        f"model {other_n}: a request for it would reach two models",
                        hint="Make the aliases of different models match different names.",
                    )
            patterns.append((n, alias.lower()))


def _overlap(a: str, b: str) -> bool:
    """Whether the globs (or names) ``a`` and ``b`` can both match one name: either matches
    the other's text, or the other's sample (each ``*``/``?`` made one letter)."""
    a, b = a.lower(), b.lower()

    def sample(glob: str) -> str:
        return glob.replace("*", "x").replace("?", "x")

    return any(
        fnmatch.fnmatchcase(name, glob)
        for glob, name in ((a, b), (b, a), (a, sample(b)), (b, sample(a)))
    )


def _entry(table: Any, where: str) -> ModelEntry:
    if not isinstance(table, dict):
        raise ModelsFileError(f"{where}: must be a [[model]] table, not {_kind(table)}")
    unknown = sorted(set(table) - set(ENTRY_KEYS))
    if unknown:
        raise ModelsFileError(
            f"{where}: unknown key {unknown[0]!r}",
            hint=f"A model entry has: {', '.join(ENTRY_KEYS)}.",
        )
    for required in ("model", "workload"):
        if required not in table:
            raise ModelsFileError(
                f"{where}: missing key {required!r}",
                hint='e.g. model = "qwen3-coder-30b" and workload = "agent" (or chat, fim).',
            )
    model = _text(table["model"], where, "model", 4096)
    try:
        workload = parse_workload(_text(table["workload"], where, "workload", 32))
    except UsageError as error:
        raise ModelsFileError(
            f"{where}: key 'workload': {error.message}", hint=error.hint
        ) from None
    return ModelEntry(
        model=model,
        workload=workload,
        slots=_slots(table.get("slots"), where),
        id=_id(table.get("id"), where),
        aliases=_aliases(table.get("aliases", []), where),
    )


def _text(value: Any, where: str, key: str, limit: int) -> str:
    if not isinstance(value, str):
        raise ModelsFileError(f"{where}: key {key!r} must be a string, not {_kind(value)}")
    text = value.strip()
    if not text or len(text) > limit or not text.isprintable():
        raise ModelsFileError(
            f"{where}: key {key!r} must be printable text of 1 to {limit} characters"
        )
    return text


def _slots(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SLOTS:
        raise ModelsFileError(
            f"{where}: key 'slots' must be a whole number from 1 to {MAX_SLOTS}, not {value!r}"
        )
    return value


def _id(value: Any, where: str) -> str | None:
    if value is None:
        return None
    text = _text(value, where, "id", MAX_NAME_CHARS)
    if not _ID.match(text):
        raise ModelsFileError(
            f"{where}: key 'id' {text!r} is not a clean id",
            hint="An id is ASCII letters, digits, '.', '_' and '-', starting with a letter or digit.",
        )
    return text


def _aliases(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_ALIASES:
        raise ModelsFileError(
            f"{where}: key 'aliases' must be a list of at most {MAX_ALIASES} names, "
            f"not {_kind(value)}"
        )
    out: list[str] = []
    for alias in value:
        text = _text(alias, where, "aliases", MAX_NAME_CHARS)
        if not _ALIAS.match(text):
            raise ModelsFileError(
                f"{where}: the alias {text!r} is not a model name a client sends",
                hint="ASCII letters, digits, '.', '_', ':', '/', '-', and * or ? as wildcards.",
            )
        if text.lower() in (a.lower() for a in out):
            raise ModelsFileError(f"{where}: the alias {text!r} is listed twice")
        out.append(text)
    return tuple(out)


def matches(name: str, ident: str, aliases: Sequence[str]) -> bool:
    """Whether a request naming ``name`` is for the model ``ident`` with ``aliases`` (case
    does not matter: clients differ in it)."""
    wanted = name.lower()
    return wanted == ident.lower() or any(fnmatch.fnmatchcase(wanted, a.lower()) for a in aliases)


def _kind(value: Any) -> str:
    return {
        bool: "true/false",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)
