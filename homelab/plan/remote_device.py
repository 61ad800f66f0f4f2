"""A device on another machine that llama-server reaches through llama.cpp's RPC backend.

``rpc-server`` on a worker host offers its memory to the main machine's llama-server
(``--rpc host:port,...``). The planner budgets each one like a card: its own total and
free memory (as the worker reports them), its own headroom, no desktop (a worker's
display, if any, is already inside its free figure), and takes it into the layer split
in llama-server's device order. Values here are plain inputs: who asks the worker is
the caller's business (``homelab.engine.llamacpp`` asks llama-server ``--list-devices``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RemoteDevice:
    """One RPC device as llama-server names it, with the memory its worker offers (bytes)."""

    endpoint: str
    """``host:port`` of the worker's rpc-server, as given to ``--rpc``."""
    name: str
    """llama-server's device name for it, verbatim (from ``llama-server --list-devices``)."""
    total: int
    free: int
