"""The engine's own API key: the secret between an engine homelab runs behind its gate and
that gate (issue 22, "Trust").

An engine on a loopback port with no key is open to every local user: anyone on the machine
could talk to it directly, past the gate's key and its token budget. So when homelab starts
an engine behind its gate it makes a fresh random key for it (:func:`new_engine_key`) and
hands it over privately: in the engine's environment (llama-server reads ``LLAMA_API_KEY``,
vLLM reads ``VLLM_API_KEY``), never on its command line, which every local user can read
(``ps``, ``/proc/PID/cmdline``). The key is kept with the engine's record in the state file
(mode 0600) so the supervisor's restarts, a detached gate and a later ``serve`` or TUI that
adopts the engine all use the same key; every homelab caller of the engine's own URL sends
it (:func:`key_headers`). Without a gate (``--no-gate``) the engine gets no key of ours.
"""

from __future__ import annotations

import secrets

KEY_BYTES = 32
"""Random bytes in a new key (43 URL-safe characters)."""
MIN_KEY_CHARS = 16
MAX_KEY_CHARS = 512


def new_engine_key() -> str:
    """A fresh random key for one engine session (URL-safe: no comma, which llama-server
    would read as a list of keys, and no space)."""
    return secrets.token_urlsafe(KEY_BYTES)


def is_engine_key(value: object) -> bool:
    """True for a key homelab could have made: printable ASCII without spaces or commas,
    of a sane length (a record holding anything else is not one homelab wrote)."""
    return (
        isinstance(value, str)
        and MIN_KEY_CHARS <= len(value) <= MAX_KEY_CHARS
        and value.isascii()
        and value.isprintable()
        and not any(c.isspace() or c == "," for c in value)
    )


def key_headers(key: str | None) -> dict[str, str]:
    """The header that authenticates a request to an engine keyed with ``key``; none for an
    engine without a key (``--no-gate``, or one started before engines had keys)."""
    return {} if key is None else {"Authorization": f"Bearer {key}"}
