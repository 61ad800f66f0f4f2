"""The ``homelab`` console entry: the one place that knows both front-ends.

``homelab.cli`` and ``homelab.ui`` never import each other (an import-linter contract).
This composition root gives the CLI a way to open the TUI (``homelab`` alone, or
``homelab ui``) without the CLI importing it: :func:`open_ui` imports ``homelab.ui.app``
only when the TUI is really opened, so ``homelab plan`` never loads Textual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def open_ui(**options: Any) -> int:
    """Run the TUI with the ``ui`` command's options; its exit status."""
    from homelab.ui.app import run_app

    return run_app(**options)


def main(argv: Sequence[str] | None = None) -> int:
    from homelab.cli import main as cli_main

    return cli_main(argv, open_ui=open_ui)
