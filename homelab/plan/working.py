"""A plan's working as structured rows: what, the arithmetic, the value.

:mod:`homelab.plan.steps` (llama.cpp) and :mod:`homelab.plan.vllm.steps` produce
:class:`Step` rows; :func:`render_step` is the one place a row becomes the line a
person reads (``homelab plan``'s output and the ``--json`` "steps" strings). A TUI
lays the same rows out in columns and highlights by ``value``.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.units import format_bytes


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the working.

    Rendered as ``{indent}{sign} {what}{sep}{formula}``; a row without a formula is a
    heading (``what:``), a row without ``what`` shows only its formula.
    """

    what: str
    formula: str = ""
    """The arithmetic and its result as a person checks it on paper."""
    value: int | None = None
    """The step's result (bytes, tokens or a count, as the row says); None: a descriptive row."""
    level: int = 0
    """0: a step; 1: a term of the step above it."""
    sign: str = ""
    """"−", "+" or "=" for a term that is taken off, added or the sum."""
    sep: str = ": "


def byte_figure(n: int) -> str:
    """Bytes as a row writes them: exact, with binary units from 1 KiB up."""
    return f"{n:,} B" if n < 1024 else f"{n:,} B ({format_bytes(n)})"


def render_step(step: Step) -> str:
    """The line a person reads for ``step``."""
    lead = "  " * step.level + (f"{step.sign} " if step.sign else "")
    if not step.formula:
        return f"{lead}{step.what}:"
    if not step.what:
        return f"{lead}{step.formula}"
    return f"{lead}{step.what}{step.sep}{step.formula}"


def render_steps(steps: tuple[Step, ...] | list[Step]) -> list[str]:
    """Every row rendered, in order."""
    return [render_step(step) for step in steps]
