"""Dump ``homelab plan`` (text and ``--json``) for every factory model on every recorded card.

Run before and after a planner change and compare the two files: a change that must not
move any plan leaves them byte-identical.

    PYTHONPATH=$PWD python3 tools/plan_dump.py OUT.json MODELS_DIR
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from unittest import mock

from homelab.cli import main
from homelab.gpu import cpu
from homelab.gpu.report import CpuMemory
from tests.factory import ARCHS, write_gguf

GPU = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "gpu"
RAM = CpuMemory(total=16 << 30, available=12 << 30)
"""System RAM held still, as tests/plan/test_same_plan_everywhere.py holds it."""


def _run(args: list[str]) -> list[object]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: object = main(args)
        except SystemExit as exit_:
            code = exit_.code
    return [code, out.getvalue(), err.getvalue()]


def dump(models: Path) -> dict[str, list[object]]:
    models.mkdir(parents=True, exist_ok=True)
    cards = [*sorted(c.stem for c in GPU.glob("*.json")), "vram16"]
    found = {}
    with mock.patch.object(cpu, "cpu_memory", return_value=RAM):
        for arch in ARCHS:
            path = models / f"{arch}.gguf"
            if not path.exists():
                write_gguf(arch, path)
            for card in cards:
                where = (
                    ["--vram", "16GiB"]
                    if card == "vram16"
                    else ["--gpu-snapshot", str(GPU / f"{card}.json")]
                )
                for extra in (["--json"], []):
                    found[f"{arch}@{card}{extra}"] = _run(["plan", str(path), *where, *extra])
    return found


if __name__ == "__main__":
    result = dump(Path(sys.argv[2]))
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"{len(result)} plans")
