"""The admission gate: an OpenAI-compatible reverse proxy that puts the ceiling in front of
the engine.

llama-server admits every request it is sent, and on a shared (unified) KV pool several
requests that each fit alone overflow it together (HTTP 500 "Context size has been
exceeded"). The gate sits on the public port, counts each request's tokens (prompt, exact
from the engine's tokenizer, plus the completion it may produce, a cap the gate writes into
the forwarded request) and admits requests in strict FIFO order while they fit the token
budget and the concurrency limit; the rest wait (bounded queue, bounded wait) or are
refused with a clear status.

The domain package never imports a front-end (cli/ui/textual/rich).
"""
