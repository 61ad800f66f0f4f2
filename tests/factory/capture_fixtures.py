"""Re-capture the real llama-server logs under ``tests/fixtures/llama_logs/``.

Run from the repository root (one llama-server at a time, CPU only)::

    HOMELAB_LLAMA_SERVER=/path/to/llama-server python -m tests.factory.capture_fixtures

File names say what was run: ``<arch>__<args>.log`` for factory models (the
acceptance set under both reference settings; deepseek2 also with equal K/V
types, since MLA refuses mixed ones) and ``fail-<what>__<args>.log``
for the failure cases (missing file, unknown architecture, busy port, quantized
V without flash attention, a KV cache too big for host memory).
"""

from __future__ import annotations

import socket
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

from . import ACCEPTANCE_ARCHS, write_gguf
from .server_log import SETTING_A, SETTING_B, SETTING_B_SAME_TYPES, capture_load_log

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "llama_logs"


def args_slug(args: list[str]) -> str:
    """``-c 4096 -np 1 -fa on`` -> ``c4096_np1_fa-on`` (for file names)."""
    parts: list[str] = []
    i = 0
    while i < len(args):
        flag = args[i].lstrip("-").replace("-", "")
        if i + 1 < len(args) and not args[i + 1].startswith("-"):
            value = args[i + 1]
            parts.append(f"{flag}{value}" if value.isdigit() else f"{flag}-{value}")
            i += 2
        else:
            parts.append(flag)
            i += 1
    return "_".join(parts)


def _save(name: str, text: str) -> Path:
    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    path = FIXTURE_DIR / f"{name}.log"
    path.write_text(text, encoding="utf-8")
    return path


def _unknown_arch_gguf(path: Path) -> Path:
    """A well-formed GGUF whose architecture llama.cpp does not know."""
    writer = gguf.GGUFWriter(str(path), "xyzzy")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def capture_all(binary: Path, workdir: Path) -> list[Path]:
    """Capture every fixture; returns the files written."""
    written: list[Path] = []
    for arch in ACCEPTANCE_ARCHS:
        model = write_gguf(arch, workdir / f"{arch}.gguf")
        settings = [SETTING_A, SETTING_B] + ([SETTING_B_SAME_TYPES] if arch == "deepseek2" else [])
        for args in settings:
            written.append(
                _save(f"{arch}__{args_slug(args)}", capture_load_log(binary, model, args))
            )
    llama = workdir / "llama.gguf"
    if not llama.exists():
        write_gguf("llama", llama)
    cases = [
        ("fail-missing-file", workdir / "does-not-exist.gguf", ["-c", "4096"]),
        ("fail-unknown-arch", _unknown_arch_gguf(workdir / "xyzzy.gguf"), ["-c", "4096"]),
        ("fail-quantized-v-no-fa", llama, ["-c", "4096", "-ctv", "q8_0", "-fa", "off"]),
        ("fail-kv-too-big", llama, ["-c", "4194304", "-np", "1", "-ctk", "f16", "-ctv", "f16"]),
    ]
    for name, model, args in cases:
        written.append(_save(f"{name}__{args_slug(args)}", capture_load_log(binary, model, args)))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = int(busy.getsockname()[1])
        text = capture_load_log(binary, llama, ["-c", "4096"], port=port)
    written.append(_save(f"fail-port-in-use__{args_slug(['-c', '4096'])}", text))
    return written


def main() -> int:
    """Entry point: capture with the llama-server ``find_llama_server`` resolves."""
    from homelab.engine.llamacpp.locate import find_llama_server

    binary = find_llama_server()
    with tempfile.TemporaryDirectory(prefix="homelab-fixtures-") as tmp:
        for path in capture_all(binary, Path(tmp)):
            print(path.relative_to(FIXTURE_DIR.parent.parent.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
