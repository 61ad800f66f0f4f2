"""The Hugging Face settings (cache, endpoint, token, offline), read when asked.

huggingface_hub reads ``HF_ENDPOINT``, ``HF_HOME``/``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE``
once, when it is imported. homelab passes the values explicitly on every call instead, read
here at call time, so a process (or a test) that sets them after the import is still
obeyed. Precedence is huggingface_hub's own (and llama-server's ``-hf``), so all three
tools use the same cache folder:

- cache: ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``,
  ``$XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``.
- token: ``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``, then the file ``hf auth login`` wrote
  (``HF_TOKEN_PATH`` or ``$HF_HOME/token``).
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "ON", "YES", "TRUE"}


def _expand(value: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(value)))


def hf_home() -> Path:
    """``HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``."""
    if value := os.environ.get("HF_HOME"):
        return _expand(value)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return _expand(xdg) / "huggingface"


def hub_cache_dir() -> Path:
    """The standard HF hub cache (``models--owner--name/{blobs,refs,snapshots}`` live here)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if value := os.environ.get(name):
            return _expand(value)
    return hf_home() / "hub"


def endpoint() -> str:
    """``HF_ENDPOINT`` without its trailing slash, or the public Hub."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token() -> str | None:
    """The token to send, or None when the user has none (then nothing is sent)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if value := os.environ.get(name, "").strip():
            return value
    path = (
        _expand(os.environ["HF_TOKEN_PATH"])
        if os.environ.get("HF_TOKEN_PATH")
        else hf_home() / "token"
    )
    try:
        value = path.read_text().strip()
    except OSError:
        return None
    return value or None


def offline() -> bool:
    """``HF_HUB_OFFLINE`` (or the older ``TRANSFORMERS_OFFLINE``) is set to a true value."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in _TRUE
