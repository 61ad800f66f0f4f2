"""Reading a running gate's numbers from another process (``homelab status``, the TUI).

The gate may run on a thread of another homelab process or in its own detached process,
so its state is asked over loopback HTTP (``GET /homelab/gate``), never shared in memory.
"""

from __future__ import annotations

import httpx

from homelab.gate.state import STATE_PATH

TIMEOUT_S = 2.0


def read_gate_state(url: str, api_key: str | None = None) -> dict[str, object] | None:
    """The gate's state as its JSON (see :meth:`homelab.gate.state.GateState.to_json`);
    None when the gate does not answer (stopped, restarting, or not a homelab gate)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:  # our own gate, on this machine, but maybe bound off loopback: no proxies though
        with httpx.Client(timeout=TIMEOUT_S, trust_env=False, headers=headers) as client:
            answer = client.get(url.rstrip("/") + STATE_PATH)
    except (httpx.HTTPError, httpx.InvalidURL):
        return None
    if answer.status_code != 200:
        return None
    try:
        data = answer.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def live_gate_state(url: str) -> dict[str, object] | None:
    """:func:`read_gate_state` with the gate's key when one is stored (``gate.key``): a
    gate off loopback checks it on every route, its own state included."""
    from homelab.errors import UsageError
    from homelab.gate.key_file import stored_key

    try:
        key = stored_key()
    except UsageError:
        key = None  # no key, or one not to be sent (status says nothing about it here)
    return read_gate_state(url, key)


def describe_gate_state(state: dict[str, object]) -> list[str]:
    """The lines ``status`` prints (and the TUI shows) for a gate's state."""
    running, queued = state.get("running"), state.get("queued")
    charged, budget = state.get("charged_tokens"), state.get("budget_tokens")
    budget_text = "?" if budget is None else f"{budget:,}"
    lines = [
        f"gate: {running} running · {queued} queued · {charged:,} of {budget_text} tokens charged"
        if isinstance(charged, int)
        else f"gate: {running} running · {queued} queued"
    ]
    refused = state.get("refused")
    refused_text = ""
    if isinstance(refused, dict) and any(refused.values()):
        refused_text = " · refused " + ", ".join(f"{k} {v}" for k, v in refused.items() if v)
    rate = state.get("cache_hit_rate")
    rate_text = "–" if not isinstance(rate, int | float) else f"{rate:.0%}"
    lines.append(f"admitted {state.get('admitted')}{refused_text} · prompt-cache hits {rate_text}")
    alarms = state.get("alarms")
    if isinstance(alarms, list) and alarms:
        latest = alarms[-1]
        if isinstance(latest, dict):
            lines.append(
                f"⚠ {len(alarms)} re-prefill alarm(s); latest: conversation "
                f"{latest.get('conversation')} re-processed its prompt "
                f"({latest.get('cached_tokens')} of {latest.get('prompt_tokens')} tokens cached)"
            )
    models = state.get("models")
    if isinstance(models, list):
        lines += [_model_line(m) for m in models if isinstance(m, dict)]
    return lines


def _model_line(model: dict[str, object]) -> str:
    """One model of a set's gate: its state, requests in flight and waiting, swaps."""
    aliases = model.get("aliases")
    named = (
        f" (also {', '.join(map(str, aliases))})" if isinstance(aliases, list) and aliases else ""
    )
    failure = f" · failed: {model['failure']}" if model.get("failure") else ""
    return (
        f"  {model.get('id')}{named}: {model.get('state')} · {model.get('in_flight')} in flight"
        f" · {model.get('waiting')} waiting · {model.get('swaps')} swaps{failure}"
    )
