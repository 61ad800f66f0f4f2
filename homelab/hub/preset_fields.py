"""A preset file's fields, each checked and typed; every problem a ``PresetError``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from homelab.errors import HomelabError, UsageError
from homelab.gguf.archs import known_architectures
from homelab.plan.workload import AGENT, CHAT, Workload, parse_workload

Engine = Literal["llama.cpp", "vllm"]
ENGINES: tuple[Engine, ...] = ("llama.cpp", "vllm")
REQUIRED = ("name", "repo", "quant", "engine", "workload", "notes", "license")
OPTIONAL = ("alt_quants", "arch", "mmproj", "facts")
FIELDS = REQUIRED + OPTIONAL
NOTES_MAX_CHARS = 600
"""Notes are one short paragraph for a table; the working belongs in comments."""
MIN_WORKLOAD_TOKENS = 256
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_QUANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


class PresetError(UsageError):
    """A preset file is unreadable or breaks the schema (exit code 2)."""

    title = "Invalid preset"


def checked_fields(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Each field present in ``data``, checked and converted to its typed value."""
    checks = {
        "name": _text,
        "repo": _repo,
        "quant": _quant,
        "alt_quants": _alt_quants,
        "engine": _engine,
        "workload": _workload,
        "notes": _notes,
        "license": _text,
        "arch": _arch,
        "mmproj": _mmproj,
        "facts": _raw,
    }
    return {name: checks[name](data[name], where, name) for name in FIELDS if name in data}


def _raw(value: Any, where: str, field: str) -> Any:
    return value  # [facts] is checked once the other fields are known (see _facts)


def bad(where: str, field: str, message: str, hint: str | None = None) -> PresetError:
    return PresetError(f"{where}: field {field!r} {message}", hint=hint)


def _text(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise bad(where, field, f"must be a string, not {_kind(value)}")
    text = value.strip()
    if not text:
        raise bad(where, field, "is empty")
    return text


def _repo(value: Any, where: str, field: str) -> str:
    text = _text(value, where, field)
    if not _REPO.match(text) or ".." in text:
        raise bad(
            where,
            field,
            f"{text!r} is not a Hugging Face repo id",
            hint="Write it as OWNER/NAME, e.g. unsloth/Qwen3.5-9B-GGUF.",
        )
    return text


def _quant(value: Any, where: str, field: str) -> str:
    text = _text(value, where, field)
    if not _QUANT.match(text):
        raise bad(
            where,
            field,
            f"{text!r} is not a quant name",
            hint="A quant is the part of the file name llama-server's -hf matches, "
            "e.g. Q4_K_M or UD-Q4_K_XL.",
        )
    return text


def _alt_quants(value: Any, where: str, field: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise bad(where, field, f"must be a list of quant names, not {_kind(value)}")
    quants: list[str] = []
    for index, item in enumerate(value):
        quant = _quant(item, where, f"{field}[{index}]")
        if quant.lower() in (q.lower() for q in quants):
            raise bad(where, f"{field}[{index}]", f"repeats {quant!r}")
        quants.append(quant)
    return tuple(quants)


def _engine(value: Any, where: str, field: str) -> Engine:
    text = _text(value, where, field)
    for engine in ENGINES:
        if text.lower() == engine:
            return engine
    raise bad(
        where,
        field,
        f"{text!r} is not an engine homelab runs",
        hint=f"Use one of: {', '.join(ENGINES)}.",
    )


def _workload(value: Any, where: str, field: str) -> Workload:
    hint = (
        f'Use "agent" (~{AGENT.tokens_per_slot:,} tokens per conversation), "chat" '
        f"(~{CHAT.tokens_per_slot:,}) or a whole number of tokens of at least "
        f"{MIN_WORKLOAD_TOKENS}."
    )
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise bad(
            where, field, f"must be a string or a whole number, not {_kind(value)}", hint=hint
        )
    if isinstance(value, int) and value < MIN_WORKLOAD_TOKENS:
        raise bad(
            where,
            field,
            f"{value} tokens is below the {MIN_WORKLOAD_TOKENS}-token minimum",
            hint=hint,
        )
    try:
        return parse_workload(str(value))
    except HomelabError:
        raise bad(where, field, f"{value!r} is not a workload", hint=hint) from None


def _notes(value: Any, where: str, field: str) -> str:
    text = _text(value, where, field)
    if len(text) > NOTES_MAX_CHARS:
        raise bad(
            where,
            field,
            f"is {len(text)} characters; keep it under {NOTES_MAX_CHARS}",
            hint="Put the working in # comments; notes are shown in a table.",
        )
    return " ".join(text.split())


def _arch(value: Any, where: str, field: str) -> str:
    text = _text(value, where, field)
    known = known_architectures()
    if text not in known:
        raise bad(
            where,
            field,
            f"{text!r} is not an architecture homelab can size",
            hint=f"Known: {', '.join(known)}. Leave arch out if unsure: the GGUF header says it.",
        )
    return text


def _mmproj(value: Any, where: str, field: str) -> str:
    text = _text(value, where, field)
    if not text.lower().endswith(".gguf") or ".." in text or text.startswith("/"):
        raise bad(
            where,
            field,
            f"{text!r} is not a .gguf file name in the repo",
            hint="Give the projector's file name as the repo lists it, e.g. mmproj-F16.gguf.",
        )
    return text


def _kind(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    return f"a {type(value).__name__}"
