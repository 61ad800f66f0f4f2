"""The TUI's settings file: the models folders, kept between runs.

``config_dir()/ui.toml``::

    models_dirs = ["/data/models", "/home/me/gguf"]

Folders given with ``--models-dir`` are added to the file, so the next ``homelab``
lists them without the option. Read with ``tomllib``; written whole (one key).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from pathlib import Path

from homelab.errors import UsageError
from homelab.paths import config_dir


def settings_path() -> Path:
    return config_dir() / "ui.toml"


def saved_models_dirs(path: Path | None = None) -> list[Path]:
    """The folders in the settings file (none when there is no file).

    Raises:
        UsageError: the file is not TOML or ``models_dirs`` is not a list of strings.
    """
    path = path or settings_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UsageError(
            f"the TUI settings file {path} cannot be read: {error}",
            hint="Fix or delete the file; it only lists the models folders.",
            title="Bad settings file",
        ) from None
    folders = data.get("models_dirs", [])
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        raise UsageError(
            f"models_dirs in {path} must be a list of folder names",
            hint='Write it as models_dirs = ["/data/models"].',
            title="Bad settings file",
        )
    return [Path(f) for f in folders]


def models_dirs_with(given: Iterable[Path], path: Path | None = None) -> list[Path]:
    """The saved folders plus ``given`` (absolute, no duplicates); saves the union when it grew."""
    path = path or settings_path()
    saved = saved_models_dirs(path)
    folders = list(saved)
    for folder in given:
        folder = folder.absolute()
        if folder not in folders:
            folders.append(folder)
    if folders != saved:
        path.parent.mkdir(parents=True, exist_ok=True)
        items = ", ".join(json.dumps(str(f)) for f in folders)  # a JSON string is a TOML string
        path.write_text(f"models_dirs = [{items}]\n", encoding="utf-8")
    return folders
