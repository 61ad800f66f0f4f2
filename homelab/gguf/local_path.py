"""Which words name a local model file: the test every front-end runs before the Hub.

Kept apart from :mod:`homelab.hub.model_ref` so a plan of a local file imports nothing
of the Hub (start-up time).
"""

from __future__ import annotations

import re
from pathlib import Path

from homelab.gguf.source import LocalFileSource


def local_or_ref(text: str) -> Path | None:
    """The local model file ``text`` names, or ``None`` when it names no local file.

    Local is: anything that exists on disk (a file, a folder, a FIFO, a dangling link),
    anything written like a path (``/``, ``./``, ``../``, ``~``, ``C:\\``), and ``FILE.gguf``
    or ``dir/FILE.gguf`` (a Hub file needs owner, name and file). ``None`` leaves ``text``
    to be read as a Hub reference (``owner/name[:QUANT]``) or a preset name. ``plan``,
    ``serve`` and every front-end decide with this, so ``/dev/zero`` is never the Hub repo
    ``dev/zero`` and a folder is the same error everywhere.

    Raises:
        ModelFileError: ``text`` names a local path that cannot be a model: missing, a
            folder, a FIFO or a device (checked without reading or blocking), unreadable,
            or a name the OS refuses (too long).
    """
    stripped = text.strip()
    if not stripped:
        return None
    path = Path(stripped).expanduser()
    if not (on_disk(path) or written_as_path(stripped) or gguf_file_name(stripped)):
        return None
    with LocalFileSource(path) as source:
        source.size()  # opens it: a missing, folder, FIFO or device path raises here
    return path


def on_disk(path: Path) -> bool:
    """Something is at ``path`` (a dangling link too); a name the OS refuses is not."""
    try:
        path.lstat()
    except (OSError, ValueError):  # missing, name too long, a NUL byte in it
        return False
    return True


def written_as_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~", "\\", ".\\")) or bool(
        re.match(r"^[A-Za-z]:[\\/]", text)
    )


def gguf_file_name(text: str) -> bool:
    return text.lower().endswith(".gguf") and text.count("/") < 2 and ":" not in text
