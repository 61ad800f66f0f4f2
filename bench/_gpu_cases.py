"""What bench/gpu_check.py serves: generated geometries at a few settings, and its table.

A :class:`Model` is a factory geometry (``tests.factory.write_gguf``) with a label; a
:class:`Case` is one ``homelab serve`` of it (context, slots, cache type, unified pool).
Three sets: ``gpu`` (weights of ~1.7 GB and KV of several GiB, so the CUDA buffers show
in NVML), ``cpu`` (the same shapes, small enough for a 2-core rehearsal) and ``smoke``
(one tiny case, for the test). Cases come in priority order: a run cut short by its
deadline still returns the most useful ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MIB = 1 << 20


@dataclass(frozen=True)
class Model:
    """A generated GGUF: ``label`` names it in files, ``arch`` + ``geometry`` make it."""

    label: str
    arch: str
    geometry: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    """One serve of ``model``: ``ctx`` tokens in all over ``slots`` slots, K and V at ``cache``."""

    model: Model
    ctx: int
    slots: int
    cache: str
    unified: bool = False
    prove: bool = True
    """Pass ``--prove`` (when ``homelab serve`` has it): fill the largest slot once."""

    def name(self) -> str:
        """``<model label>__<flags>``, as the factory's fixture logs are named."""
        from tests.factory.capture_fixtures import args_slug

        return f"{self.model.label}__{args_slug(self.llama_args())}"

    def llama_args(self) -> list[str]:
        """The llama-server flags this case sets (they name its load log)."""
        args = ["-c", str(self.ctx), "-np", str(self.slots), "-ctk", self.cache]
        args += ["-ctv", self.cache, "-fa", "on"]
        return args + (["-kvu"] if self.unified else [])

    def serve_flags(self) -> list[str]:
        """The same settings as ``homelab plan``/``serve`` options."""
        flags = ["--ctx", str(self.ctx), "--parallel", str(self.slots), "--cache-type", self.cache]
        return flags + (["--kv-unified"] if self.unified else [])

    def sibling_key(self) -> tuple[str, int, int, bool]:
        """Cases with equal keys differ only in cache type (their compute buffers give the
        flash-attention F16 copy: quantized minus f16)."""
        return (self.model.label, self.ctx, self.slots, self.unified)


# ~1.7 GB of F16 weights: 16 layers 2048 wide (FFN 5632), Llama-3.1-8B attention (32 q heads,
# 8 KV heads of 128).
LLAMA_1G7 = Model("llama-1g7", "llama", {"n_layer": 16, "n_embd": 2048, "n_ff": 5632})
# The same shape, ~53 MB: the CPU rehearsal's version.
LLAMA_53M = Model("llama-53m", "llama", {"n_layer": 4, "n_embd": 512, "n_ff": 1024})
# The factory's defaults: real KV geometry, tiny widths (files of a few MB to ~20 MB).
LLAMA = Model("llama", "llama")
GEMMA3 = Model("gemma3", "gemma3")
QWEN35 = Model("qwen35", "qwen35")
GPT_OSS = Model("gpt-oss", "gpt-oss")
DEEPSEEK2 = Model("deepseek2", "deepseek2")

CASE_SETS: dict[str, tuple[Case, ...]] = {
    "gpu": (
        Case(LLAMA_1G7, 32768, 1, "f16"),
        Case(LLAMA_1G7, 32768, 1, "q8_0"),
        Case(LLAMA_1G7, 65536, 4, "q8_0"),
        Case(LLAMA_1G7, 65536, 4, "q8_0", unified=True),
        Case(GEMMA3, 32768, 1, "q8_0"),
        Case(QWEN35, 32768, 2, "q8_0"),
        Case(GPT_OSS, 32768, 1, "f16"),
        Case(DEEPSEEK2, 16384, 1, "q8_0"),
        # KV of 8.5 and 16 GiB; last, since a proof at 131k tokens (if serve proves by default
        # and has no --no-prove) is a long prefill
        Case(LLAMA, 131072, 1, "q8_0", prove=False),
        Case(LLAMA, 131072, 1, "f16", prove=False),
    ),
    "cpu": (
        Case(LLAMA_53M, 4096, 1, "f16", prove=False),
        Case(LLAMA_53M, 4096, 1, "q8_0", prove=False),
        Case(LLAMA_53M, 8192, 4, "q8_0", prove=False),
        Case(LLAMA_53M, 8192, 4, "q8_0", unified=True, prove=False),
        Case(GEMMA3, 4096, 1, "q8_0", prove=False),
        Case(QWEN35, 4096, 2, "q8_0", prove=False),
    ),
    "smoke": (Case(LLAMA, 2048, 1, "q8_0", prove=False),),
}

TABLE_PARTS = ("weights", "kv", "compute", "fa_copy", "cuda_context", "total")
"""The parts of each result the table shows, predicted/actual in MiB."""


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:.0f}"


def _percent(predicted: int | None, actual: int | None) -> str:
    if predicted is None or actual is None or not predicted:
        return "n/a"
    return f"{(actual - predicted) / predicted:+.1%}"


def format_table(results: list[dict[str, Any]]) -> str:
    """One line per case: each part as predicted/actual MiB, then the total's difference."""
    head = ["case", *(f"{p} MiB" for p in TABLE_PARTS), "Δ total", "ok"]
    rows = [head]
    for result in results:
        parts = result.get("parts") or {}
        cells = [result["name"]]
        for part in TABLE_PARTS:
            got = parts.get(part) or {}
            cells.append(f"{_mib(got.get('predicted'))}/{_mib(got.get('actual'))}")
        total = parts.get("total") or {}
        cells.append(_percent(total.get("predicted"), total.get("actual")))
        cells.append(_verdict(result))
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    )


def _verdict(result: dict[str, Any]) -> str:
    """``yes`` when the total is within 3 %, ``no`` past it, else why there is no total."""
    if result.get("error"):
        return "error"
    total = (result.get("parts") or {}).get("total") or {}
    predicted, actual = total.get("predicted"), total.get("actual")
    if predicted is None or actual is None or not predicted:
        return "n/a"
    return "yes" if abs(actual - predicted) <= 0.03 * predicted else "no"
