"""The TUI's settings file: the models folders and the llama-server to run, kept between runs.

``config_dir()/ui.toml``::

    models_dirs = ["/data/models", "/home/me/gguf"]
    llama_server = "/opt/llama.cpp/build/bin/llama-server"

Folders given with ``--models-dir`` are added to the file, so the next ``homelab``
lists them without the option. ``llama_server`` is the binary the user pointed the app
to (the app hands it to the domain's locate rules at start). Read with ``tomllib``;
written whole (each key the file has).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from homelab.errors import UsageError
from homelab.paths import config_dir

LLAMA_SERVER_KEY = "llama_server"


def settings_path() -> Path:
    return config_dir() / "ui.toml"


def llama_server_setting(path: Path | None = None) -> str:
    """How errors name the saved llama-server: the key and its file."""
    return f"{LLAMA_SERVER_KEY} in {path or settings_path()}"


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UsageError(
            f"the TUI settings file {path} cannot be read: {error}",
            hint="Fix or delete the file; it only lists the models folders and the llama-server.",
            title="Bad settings file",
        ) from None


def _write(path: Path, folders: list[Path], llama_server: Path | None) -> None:
    lines = []
    if folders:
        items = ", ".join(json.dumps(str(f)) for f in folders)  # a JSON string is a TOML string
        lines.append(f"models_dirs = [{items}]")
    if llama_server is not None:
        lines.append(f"{LLAMA_SERVER_KEY} = {json.dumps(str(llama_server))}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def saved_models_dirs(path: Path | None = None) -> list[Path]:
    """The folders in the settings file (none when there is no file).

    Raises:
        UsageError: the file is not TOML or ``models_dirs`` is not a list of strings.
    """
    path = path or settings_path()
    folders = _read(path).get("models_dirs", [])
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        raise UsageError(
            f"models_dirs in {path} must be a list of folder names",
            hint='Write it as models_dirs = ["/data/models"].',
            title="Bad settings file",
        )
    return [Path(f) for f in folders]


def saved_llama_server(path: Path | None = None) -> Path | None:
    """The llama-server the user pointed the app to, or None when the file names none.

    Raises:
        UsageError: the file is not TOML or ``llama_server`` is not a string.
    """
    path = path or settings_path()
    value = _read(path).get(LLAMA_SERVER_KEY)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(
            f"{LLAMA_SERVER_KEY} in {path} must be the path of a llama-server binary",
            hint=f'Write it as {LLAMA_SERVER_KEY} = "/path/to/llama-server", or delete the line.',
            title="Bad settings file",
        )
    return Path(value)


def save_llama_server(binary: Path | None, path: Path | None = None) -> None:
    """Keep ``binary`` as the llama-server of the next runs (None forgets it)."""
    path = path or settings_path()
    _write(path, saved_models_dirs(path), None if binary is None else binary.absolute())


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
        _write(path, folders, saved_llama_server(path))
    return folders
