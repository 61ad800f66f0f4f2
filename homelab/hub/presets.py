"""Presets: one TOML file per model that runs well on a 16-24 GB card.

Shipped presets live in the repository's top-level ``presets/`` folder (an installed
wheel carries them as ``homelab/_presets``); a person's own presets live in
``config_dir()/presets``. A user file with the same name as a shipped one overrides
it field by field (only the fields it sets); a user file with a new name adds a
preset and must give every required field.

A preset file::

    name = "Qwen3.5 9B"                 # display name
    repo = "unsloth/Qwen3.5-9B-GGUF"    # Hugging Face repo id
    quant = "Q4_K_M"                    # default quant (matched like llama-server's -hf)
    alt_quants = ["Q5_K_M", "Q8_0"]     # optional
    engine = "llama.cpp"                # or "vllm"
    workload = "agent"                  # "agent", "chat" or tokens per conversation (int)
    notes = "..."                       # short
    license = "apache-2.0"
    arch = "qwen35"                     # optional: GGUF architecture (must be one homelab sizes)
    mmproj = "mmproj-F16.gguf"          # optional: vision projector file in the repo
    [facts]                             # optional: geometry and sizes (homelab.hub.preset_facts)

Every problem is a ``PresetError`` (exit code 2) naming the file and the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from homelab.errors import HomelabError, UsageError
from homelab.files import TomlTextError, read_toml
from homelab.hub.preset_facts import FactsProblem, PresetFacts, parse_facts, stand_in
from homelab.hub.preset_fields import (
    FIELDS,
    REQUIRED,
    Engine,
    PresetError,
    bad,
    checked_fields,
)
from homelab.plan.workload import Workload

Origin = Literal["shipped", "user"]

MAX_PRESET_BYTES = 1024 * 1024
"""A preset is a few hundred bytes; a file larger than this is not one (and is not read)."""

_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_PACKAGED = Path(__file__).resolve().parent.parent / "_presets"
"""Where a built wheel puts the shipped presets (pyproject's force-include)."""
_CHECKOUT = Path(__file__).resolve().parent.parent.parent / "presets"
"""The repository's top-level ``presets/`` (source checkout or editable install)."""


class UnknownPresetError(UsageError):
    """A preset name that neither the shipped nor the user presets define."""

    title = "Unknown preset"


@dataclass(frozen=True, slots=True)
class Preset:
    """One validated preset: what to download, how to run it, and why it was chosen."""

    key: str
    """The file name without ``.toml``: what ``homelab serve KEY`` takes."""
    name: str
    repo: str
    quant: str
    alt_quants: tuple[str, ...]
    engine: Engine
    workload: Workload
    notes: str
    license: str
    arch: str | None
    mmproj: str | None
    origin: Origin
    source: Path
    """The file the preset came from (the user's file when it overrides a shipped one)."""
    overrides: Path | None = None
    """The shipped file a user preset overrides, if any."""
    facts: PresetFacts | None = None
    """Geometry and sizes to plan from before a header has been read."""

    @property
    def ref(self) -> str:
        """``REPO:QUANT``, the form ``homelab pull`` / ``plan`` / llama-server ``-hf`` take."""
        return f"{self.repo}:{self.quant}"

    @property
    def quants(self) -> tuple[str, ...]:
        """The default quant first, then the alternatives."""
        return (self.quant, *self.alt_quants)


def shipped_presets_dir() -> Path | None:
    """The folder of the presets homelab ships, or None when neither copy exists.

    An installed wheel has them inside the package (``homelab/_presets``); a source
    checkout or an editable install reads the top-level ``presets/`` directly.
    """
    for folder in (_PACKAGED, _CHECKOUT):
        if folder.is_dir():
            return folder
    return None


def user_presets_dir() -> Path:
    """``config_dir()/presets``: where a person's own presets go (not created here)."""
    from homelab.paths import config_dir

    return config_dir() / "presets"


def load_presets(user_dir: Path | None | Literal["default"] = "default") -> list[Preset]:
    """Every preset, shipped and user, sorted by key; user files override by name.

    Args:
        user_dir: folder of user presets; ``"default"`` is ``user_presets_dir()``, None skips it.

    Raises:
        PresetError: a file cannot be read, is not TOML, or breaks the schema; the
            message names the file and the field. One bad file stops the listing, so
            a typo is never silently dropped.
    """
    if user_dir == "default":
        user_dir = user_presets_dir()
    presets: dict[str, Preset] = {}
    for path in _toml_files(shipped_presets_dir()):
        presets[path.stem] = load_preset_file(path, origin="shipped")
    for path in _toml_files(user_dir):
        presets[path.stem] = load_preset_file(path, origin="user", base=presets.get(path.stem))
    return [presets[key] for key in sorted(presets)]


def find_preset(key: str, presets: Iterable[Preset] | None = None) -> Preset:
    """The preset named ``key`` (case-insensitive).

    Raises:
        UnknownPresetError: no preset has that name; the message lists the names there are.
        PresetError: loading the presets failed (see ``load_presets``).
    """
    available = list(load_presets() if presets is None else presets)
    for preset in available:
        if preset.key == key.lower():
            return preset
    names = ", ".join(p.key for p in available) or "none"
    raise UnknownPresetError(
        f"there is no preset named {key!r}",
        hint=f"Presets: {names}. Add your own as {user_presets_dir() / (key.lower() + '.toml')}.",
    )


def load_preset_file(path: Path, *, origin: Origin, base: Preset | None = None) -> Preset:
    """Read and validate one preset file.

    Args:
        path: the ``.toml`` file; its stem is the preset's key.
        origin: ``"shipped"`` or ``"user"``.
        base: the shipped preset this user file overrides: fields the file leaves out
            are taken from it.

    Raises:
        PresetError: the file cannot be read or parsed, its name is not a usable key,
            a field is unknown, missing, of the wrong type or out of range.
    """
    where = str(path)
    if not _KEY.match(path.stem):
        raise PresetError(
            f"{where}: the file name {path.stem!r} is not a usable preset name",
            hint="Use lowercase letters, digits, '.', '_' and '-' (e.g. qwen3.5-9b.toml).",
        )
    try:
        data = read_toml(path, MAX_PRESET_BYTES, "a preset")
    except OSError as error:  # also a FIFO or device (never opened to block) or too large
        raise PresetError(f"{where}: cannot be read: {error.strerror or error}") from None
    except TomlTextError as problem:
        raise PresetError(f"{where}: {problem}") from None
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise PresetError(
            f"{where}: unknown field {unknown[0]!r}",
            hint=f"A preset has: {', '.join(FIELDS)}.",
        )
    fields = {name: getattr(base, name) for name in FIELDS} if base is not None else {}
    fields.update(checked_fields(data, where))
    missing = [name for name in REQUIRED if name not in fields]
    if missing:
        raise PresetError(
            f"{where}: missing field {missing[0]!r}",
            hint=_missing_hint(missing, base),
        )
    facts = fields.get("facts")
    if facts is not None and not isinstance(facts, PresetFacts):
        facts = _facts(facts, where, fields)
    return Preset(
        key=path.stem,
        name=fields["name"],
        repo=fields["repo"],
        quant=fields["quant"],
        alt_quants=fields.get("alt_quants", ()),
        engine=fields["engine"],
        workload=fields["workload"],
        notes=fields["notes"],
        license=fields["license"],
        arch=fields.get("arch"),
        mmproj=fields.get("mmproj"),
        origin=origin,
        source=path,
        overrides=base.source if base is not None else None,
        facts=facts,
    )


def _facts(data: Any, where: str, fields: Mapping[str, Any]) -> PresetFacts:
    """The ``[facts]`` table typed, and its geometry read as the planner reads a header."""
    from homelab.gguf.geometry import geometry_of

    quants = (fields["quant"], *fields.get("alt_quants", ()))
    try:
        facts = parse_facts(data, fields.get("arch"), quants)
    except FactsProblem as problem:
        raise bad(where, problem.key, problem.message, "See homelab.hub.preset_facts.") from None
    try:
        geometry_of(stand_in(facts, quants[0], where))
    except HomelabError as error:
        raise bad(
            where, "facts", f"the geometry is not one homelab can size: {error.message}"
        ) from None
    return facts


def _toml_files(folder: Path | None) -> list[Path]:
    if folder is None or not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.toml") if p.is_file())


def _missing_hint(missing: list[str], base: Preset | None) -> str:
    also = f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""
    if base is None:
        return f"A new preset needs {', '.join(REQUIRED)}{also}."
    return f"Every field is required{also}."
