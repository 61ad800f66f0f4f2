"""The domain (homelab/ minus the UI package) never imports Textual."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import homelab


def _domain_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(homelab.__path__, prefix="homelab."):
        if info.name == "homelab.ui" or info.name.startswith("homelab.ui."):
            continue
        if info.name == "homelab.__main__":  # runs the CLI when imported
            continue
        names.append(info.name)
    return names


def test_domain_modules_do_not_load_textual() -> None:
    modules = _domain_modules()
    assert "homelab.gguf.reader" in modules and "homelab.plan.planner" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(len(sys.modules))\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, (
        f"textual was imported by the domain:\n{result.stdout}{result.stderr}"
    )


def test_the_check_itself_detects_textual() -> None:
    """Guard against a check that cannot fail: importing textual must be seen."""
    code = "import sys, textual\nsys.exit(1 if 'textual' in sys.modules else 0)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert result.returncode == 1
