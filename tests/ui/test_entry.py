"""``homelab`` alone and ``homelab ui`` open the TUI through the console entry; the CLI
alone keeps its old behaviour; ``homelab plan`` never loads Textual."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from homelab.cli import main as cli_main
from homelab.entry import main as entry_main


def test_the_cli_alone_still_prints_its_help_without_a_command(capsys) -> None:
    assert cli_main([]) == 2
    assert "usage: homelab" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {"gpu_snapshot": None, "vram": None, "models_dirs": (), "port": None}),
        (
            ["ui", "--vram", "16GiB", "--models-dir", "a", "--models-dir", "b", "--port", "9000"],
            {
                "gpu_snapshot": None,
                "vram": "16GiB",
                "models_dirs": (Path("a"), Path("b")),
                "port": 9000,
            },
        ),
        (
            ["--gpu-snapshot", "snap.json"],
            {"gpu_snapshot": Path("snap.json"), "vram": None, "models_dirs": (), "port": None},
        ),
    ],
)
def test_no_command_and_ui_open_the_tui_with_its_options(argv, expected) -> None:
    opened: list[dict] = []

    def open_ui(**options) -> int:
        opened.append(options)
        return 0

    assert cli_main(argv, open_ui=open_ui) == 0
    assert opened == [expected]


def test_a_bad_port_is_a_usage_error_not_a_traceback(capsys) -> None:
    assert entry_main(["ui", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert "port" in err and "Traceback" not in err


def test_plan_does_not_load_textual(smollm2_gguf: Path) -> None:
    code = (
        "import sys\n"
        "from homelab.entry import main\n"
        f"main(['plan', {str(smollm2_gguf)!r}, '--vram', '8GiB', '--json'])\n"
        "sys.exit(2 if 'textual' in sys.modules else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
