"""Where homelab keeps things on disk (created on use, never at import).

``HOMELAB_DATA_DIR``, ``HOMELAB_STATE_DIR``, ``HOMELAB_CONFIG_DIR`` and
``HOMELAB_CACHE_DIR`` override the platform defaults (tests use them to stay
out of the real home directory).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

_APP = "homelab"


def _dir(env: str, default: str) -> Path:
    value = os.environ.get(env)
    path = Path(value) if value else Path(default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """Built engines and other large things homelab made itself."""
    return _dir("HOMELAB_DATA_DIR", platformdirs.user_data_dir(_APP))


def state_dir() -> Path:
    """Logs, state files and calibration records."""
    return _dir("HOMELAB_STATE_DIR", platformdirs.user_state_dir(_APP))


def config_dir() -> Path:
    """The settings file and user presets."""
    return _dir("HOMELAB_CONFIG_DIR", platformdirs.user_config_dir(_APP))


def cache_dir() -> Path:
    """Downloaded source archives and other things that can be fetched again."""
    return _dir("HOMELAB_CACHE_DIR", platformdirs.user_cache_dir(_APP))
