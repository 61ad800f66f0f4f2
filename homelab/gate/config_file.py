"""The gate's settings as a person sets them: ``config_dir()/gate.toml``, under the serve's own.

``gate.toml`` holds any of the settings of :class:`GateChoices` at its top level::

    max_concurrent = 1        # one request at a time (queueing beats sharing)
    token_budget = 6000       # tokens admitted at once (default: from the engine)
    queue_timeout_s = 120
    host = "127.0.0.1"

    [sampling]                # written into requests that leave them out (gate/sampling.py)
    temperature = 0.6

A setting given to the serve itself (its flags, the TUI's fields) wins over the file.
Every error names the setting and the file. :func:`resolve_gate` gives the
:class:`~homelab.gate.settings.GateSettings` for a port: an address other than
127.0.0.1 (or ``require_api_key = true``) gets the API key of
:mod:`homelab.gate.key_file`, made on first use.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.errors import UsageError
from homelab.gate.sampling import SamplingDefaults, as_defaults, sampling_problem
from homelab.paths import config_dir

if TYPE_CHECKING:
    from homelab.gate.settings import GateSettings

CONFIG_NAME = "gate.toml"
LOOPBACK = "127.0.0.1"
_TITLE = "Bad gate settings"


@dataclass(frozen=True, slots=True)
class GateChoices:
    """The gate settings a person set; None: not set (the file's value, else the default)."""

    host: str | None = None
    max_concurrent: int | None = None
    token_budget: int | None = None
    queue_timeout_s: float | None = None
    max_queue: int | None = None
    max_tokens_cap: int | None = None
    max_prompts: int | None = None
    idle_timeout_s: float | None = None
    max_connections: int | None = None
    allowed_origins: tuple[str, ...] | None = None
    """Web pages allowed to call the gate from a browser (CORS); none by default."""
    sampling: SamplingDefaults | None = None
    """``[sampling]``: what the gate writes into a request that leaves it out."""
    api_key: str | None = None
    affinity: bool | None = None
    require_api_key: bool | None = None
    """Check a key even on 127.0.0.1 (off loopback it is always checked)."""

    def over(self, base: GateChoices) -> GateChoices:
        """These choices, the unset ones taken from ``base``."""
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(base, **{k: v for k, v in given.items() if v is not None})


@dataclass(frozen=True, slots=True)
class ResolvedGate:
    """The gate's settings, and the key file when a key was made for them just now."""

    settings: GateSettings
    key_created: Path | None = None


def config_path() -> Path:
    """Where ``gate.toml`` is read from."""
    return config_dir() / CONFIG_NAME


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _word(value: object) -> bool:
    return isinstance(value, str) and bool(value) and not any(c.isspace() for c in value)


_RULES = {
    "host": (_word, "an address (text)"),
    "max_concurrent": (_positive_int, "a whole number ≥ 1"),
    "token_budget": (_positive_int, "a whole number of tokens ≥ 1"),
    "queue_timeout_s": (_positive_number, "a number of seconds > 0"),
    "max_queue": (_count, "a whole number ≥ 0 (0: never wait)"),
    "max_tokens_cap": (_positive_int, "a whole number of tokens ≥ 1"),
    "idle_timeout_s": (_positive_number, "a number of seconds > 0"),
    "max_connections": (_positive_int, "a whole number ≥ 1"),
    "max_prompts": (_positive_int, "a whole number ≥ 1 (prompts × n in one request)"),
    "api_key": (_word, "text without spaces"),
    "allowed_origins": (
        lambda v: isinstance(v, tuple) and all(isinstance(o, str) for o in v),
        'a list of origins (["http://localhost:3000"])',
    ),
    "affinity": (lambda v: isinstance(v, bool), "true or false"),
    "require_api_key": (lambda v: isinstance(v, bool), "true or false"),
    "sampling": (lambda v: isinstance(v, tuple), "a table ([sampling])"),
}


def check_choices(choices: GateChoices, where: str) -> None:
    """Raise UsageError naming the first setting out of range (``where`` says whose)."""
    for name, (ok, wanted) in _RULES.items():
        value = getattr(choices, name)
        if value is not None and not ok(value):
            raise UsageError(
                f"the gate setting {name} {where} must be {wanted}, not {value!r}",
                hint=f"set {name} to {wanted}",
                title=_TITLE,
            )


def read_config(path: Path | None = None) -> GateChoices:
    """The choices ``gate.toml`` holds (none when there is no file).

    Raises:
        UsageError: not TOML, not a regular file, an unknown setting, or a value out of range.
    """
    path = path or config_path()
    if not path.exists():
        return GateChoices()
    if not path.is_file():
        raise UsageError(f"{path} is not a file", hint=f"remove {path}", title=_TITLE)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UsageError(
            f"cannot read {path}: {error.strerror}", hint=f"fix or remove {path}", title=_TITLE
        ) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UsageError(
            f"{path} is not valid TOML: {error}", hint=f"fix or remove {path}", title=_TITLE
        ) from None
    unknown = sorted(set(data) - set(_RULES))
    if unknown:
        raise UsageError(
            f"{path} sets {', '.join(unknown)}, which the gate does not know "
            f"(it knows {', '.join(_RULES)})",
            hint=f"remove {unknown[0]} from {path}"
            + ("; the port is the serve's own setting" if "port" in unknown else ""),
            title=_TITLE,
        )
    if "sampling" in data:
        problem = sampling_problem(data["sampling"])
        if problem:
            raise UsageError(f"{path}: {problem}", hint=f"fix [sampling] in {path}", title=_TITLE)
        data["sampling"] = as_defaults(data["sampling"])
    if isinstance(data.get("allowed_origins"), list):
        data["allowed_origins"] = tuple(data["allowed_origins"])
    choices = GateChoices(**data)
    check_choices(choices, f"in {path}")
    return choices


def resolve_gate(
    choices: GateChoices,
    port: int,
    *,
    config: Path | None = None,
    key_file: Path | None = None,
) -> ResolvedGate:
    """The gate's settings for ``port``: ``choices`` over ``gate.toml``, the key when needed.

    Raises:
        UsageError: a setting is out of range (named, with the file when it is the file's).
    """
    from homelab.gate.key_file import load_or_create_key
    from homelab.gate.settings import GateSettings

    check_choices(choices, "given to serve")
    merged = choices.over(read_config(config))
    created = None
    key = merged.api_key
    if key is None and (merged.host not in (None, LOOPBACK) or merged.require_api_key):
        key, made = load_or_create_key(key_file)
        if made:
            from homelab.gate.key_file import key_path

            created = key_file or key_path()
    given = {
        f.name: getattr(merged, f.name)
        for f in fields(merged)
        if f.name != "require_api_key" and getattr(merged, f.name) is not None
    }
    given["api_key"] = key
    settings = GateSettings(port=port, **given)
    settings.check()
    return ResolvedGate(settings, created)
