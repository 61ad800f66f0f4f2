"""The admission gate: an OpenAI-compatible reverse proxy that puts the ceiling in front of
the engine.

llama-server admits every request it is sent, and on a shared (unified) KV pool several
requests that each fit alone overflow it together (HTTP 500 "Context size has been
exceeded"). The gate sits on the public port, counts each request's tokens (prompt, exact
from the engine's tokenizer, plus the completion it may produce, a cap the gate writes into
the forwarded request) and admits requests in strict FIFO order while they fit the token
budget and the concurrency limit; the rest wait (bounded queue, bounded wait) or are
refused with a clear status.

Modules, one concern each:

- :mod:`~homelab.gate.settings` ``GateSettings`` (the user's settings, checked);
  :mod:`~homelab.gate.limits` the budget, per-request ceiling and concurrency resolved
  from the settings and the engine's facts.
- :mod:`~homelab.gate.admission` the bare queue state (pure, synchronous);
  :mod:`~homelab.gate.waiting` the asyncio layer over it (an event per entry).
- :mod:`~homelab.gate.requests` what a request asks (route, stream, cap) and the cap
  written into it; :mod:`~homelab.gate.upstream` the engine client (token counts,
  ``/slots``); :mod:`~homelab.gate.sse` reading the accounting fields off a stream.
- :mod:`~homelab.gate.affinity` conversation → slot, prompt-cache reuse and the re-prefill
  alarm; :mod:`~homelab.gate.metrics` the gate's prometheus metrics.
- :mod:`~homelab.gate.core` ``Gate``, the parts together on the event loop, and its
  :class:`~homelab.gate.state.GateState` snapshot (:mod:`~homelab.gate.state`).
- :mod:`~homelab.gate.forward` the completion routes; :mod:`~homelab.gate.server` the app
  (auth, passthrough, ``/health``, ``/metrics``); :mod:`~homelab.gate.replies` the gate's
  own answers (OpenAI/Anthropic-shaped errors); :mod:`~homelab.gate.errors` its errors;
  :mod:`~homelab.gate.runner` ``GateRunner``, the gate on its own thread and event loop.

The domain package never imports a front-end (cli/ui/textual/rich).
"""
