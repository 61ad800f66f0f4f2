"""An engine a TUI leaves running, handed to homelab's keeper.

Quitting the TUI with "leave running" released the engine (and its gate process) from the
app's supervisor; without more, nothing would restart either after a crash. Here a keeper
is started for it exactly as ``homelab serve MODEL --detach`` starts one
(:func:`homelab.serve.keeper.launch`), with the running engine's own facts as the plan
request (its total context, slots, cache types, unified pool, engine and public port), so
the keeper's session finds the engine left running with the settings asked for and adopts
it (with its gate) instead of starting another. What the keeper said is kept for the
person; a keeper that refuses (the card changed so that the same settings no longer fit,
say) leaves the engine running as it was, unkept, and says why.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from homelab.engine.supervision.facts import PlanFacts
    from homelab.serve.session import ServeSession


@dataclass(frozen=True)
class HandOver:
    """How the hand-over went: ``kept`` (a keeper now keeps it) and its last words."""

    kept: bool
    said: str


def keeper_words(
    model: str, engine: str, facts: PlanFacts, port: int, card: Sequence[str] = ()
) -> list[str]:
    """``serve`` words that plan ``model`` with the running engine's own settings (``card``:
    how the card is read, e.g. ``--gpu-snapshot FILE``)."""
    words = ["serve", model, "--engine", engine, "--port", str(port)]
    words += ["--ctx", str(facts.ctx_total), "--parallel", str(facts.slots)]
    if facts.cache_type_k:
        words += ["--cache-type-k", facts.cache_type_k]
    if facts.cache_type_v:
        words += ["--cache-type-v", facts.cache_type_v]
    if facts.unified:
        words.append("--kv-unified")
    return [*words, *card]


def hand_to_keeper(
    model: str, engine: str, facts: PlanFacts, port: int, card: Sequence[str] = ()
) -> HandOver:
    """Start a keeper that adopts the engine left running on ``port`` (see the module)."""
    from homelab.serve.keeper import launch

    out, err = io.BytesIO(), io.BytesIO()
    code = launch(keeper_words(model, engine, facts, port, card), out, err)
    lines = [
        line
        for line in (out.getvalue() + err.getvalue()).decode(errors="replace").splitlines()
        if line.strip()
    ]
    kept = [line for line in lines if "kept by homelab's keeper" in line]
    if code == 0 and kept:
        return HandOver(True, kept[-1].strip())
    return HandOver(False, lines[-1].strip() if lines else f"the keeper exited with {code}")


def leave_to_keeper(session: ServeSession, card: Sequence[str] = ()) -> str:
    """Let ``session``'s engine (and its gate) go, then hand them to a keeper when the engine
    was ready and its facts are known (else they are left running, unkept, for the next
    homelab to adopt); what was done, in words. ``card``: how the keeper reads the card
    (``--gpu-snapshot FILE`` / ``--vram SIZE``, as the caller did)."""
    supervisor = session.supervisor
    released = session.let_go()
    if not released and supervisor is not None:
        supervisor.release()
    session.close()
    facts = None if supervisor is None else supervisor.spec.facts
    public = None if supervisor is None else (session.public_url or supervisor.url)
    port = None if public is None else urlsplit(public).port
    if supervisor is None or not released or facts is None or port is None:
        return "left running (the next homelab adopts it; homelab stop stops it)"
    engine = session.request.options.engine.name
    handed = hand_to_keeper(supervisor.spec.model, engine, facts, port, card)
    if handed.kept:
        return handed.said
    return f"left running without a keeper ({handed.said}); homelab stop stops it"
