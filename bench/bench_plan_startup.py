"""Benchmark: the whole ``homelab plan FILE.gguf`` process against llama-mdl's ``mdl fit``.

Run on demand (not a test)::

    PYTHONPATH=$PWD python bench/bench_plan_startup.py [--repeat N] [--mdl PATH] [--python PATH]

It writes, in a temporary folder, the header of a Qwen3.5-9B Q4_K_M GGUF with the
test factory's ``qwen35`` writer (``tests.factory.gdn``) at the real model's widths
(32 blocks, every 4th full attention with 16 q heads and 4 KV heads of 256, 24
Gated-DeltaNet blocks, hidden 4096, FFN 12288), a 248,320-token byte-level BPE
vocabulary with its token types, 240,000 merges and a chat template: a ~10 MB header.
Tensors are described only (tensor infos with Q4_K/Q6_K types and exact byte sizes);
the data section is a sparse file, so neither tool touches weights.

Then it runs, interleaved, ``--repeat`` times each (default 5):

- ``python -m homelab plan FILE --json`` with ``--vram 16GiB`` (a synthetic card) and
  with ``--gpu-snapshot`` (a recorded RTX 4060 Ti replayed): engine-free, no NVML probe;
- ``mdl fit FILE --no-oracle --json`` of llama-mdl 0.14 (the closest Python peer; its
  analytic fit, without ``llama-fit-params``);
- the floors: ``python -c pass`` (interpreter start-up) and a ``python -c`` that reads
  the header's bytes (start-up plus reading the header from page cache), and mdl's own
  interpreter's ``-c pass``;

and prints the median wall time and CPU time (user+sys, steadier on a busy machine) of
each, and the ratio mdl / homelab (goal: homelab >= 2x faster). Byte-code is cached for
both, as an installed package has it.

llama-mdl lives in its own virtual environment outside the repository (``mdl`` there
runs on that venv's interpreter); without it the bench says how to install it and
still prints homelab's times. ``--python`` runs homelab on another interpreter, e.g. a
venv with its runtime dependencies (``psutil platformdirs nvidia-ml-py``), so both
tools start from a comparable ``site``: an interpreter whose site-packages carry
``.pth`` start-up hooks pays for them before homelab's first line (compare the two
``-c pass`` floors).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import gguf

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.factory import geometry
from tests.factory.gdn import build_gdn
from tests.factory.header_only import HeaderOnlyWriter

N_VOCAB = 248_320  # Qwen3.5's vocab_size (config.json)
N_SPECIAL = 33
N_MERGES = 240_000
QWEN35_9B = dict(n_embd=4096, n_ff=12288)
"""Widths the factory shrinks (it keeps the real head/layer geometry); here they are real."""

MDL_VENV = Path("/work/venvs/mdl")
MDL_INSTALL = (
    f"python3 -m venv {MDL_VENV} && {MDL_VENV}/bin/pip install llama-mdl==0.14.0  "
    f"(then pass --mdl {MDL_VENV}/bin/mdl, or put mdl on PATH)"
)
QT = gguf.GGMLQuantizationType
SNAPSHOT = ROOT / "tests" / "fixtures" / "gpu" / "rtx4060ti16_xorg.json"
MDL = "mdl fit --no-oracle"
VRAM = "homelab plan --vram 16GiB"
SNAP = "homelab plan --gpu-snapshot"
HEADER_FLOOR = "python reads the header"


def _q4_k_m_mix(name: str, ne: tuple[int, ...]) -> QT:
    """``Q4_K_M``'s bulk Q4_K; the output and every ``attn_v`` / ``ffn_down`` Q6_K (as
    llama-quantize's mix does); rows that are no multiple of 256 Q8_0 or F16."""
    if ne[0] % 256:
        return QT.Q8_0 if ne[0] % 32 == 0 else QT.F16
    if name == "output.weight" or name.endswith(("attn_v.weight", "ffn_down.weight")):
        return QT.Q6_K
    return QT.Q4_K


class Qwen35HeaderWriter(HeaderOnlyWriter):
    """The factory's header-only writer with Qwen3.5's full vocabulary (248,320 tokens,
    240,000 merges, a chat template): the ~10 MB header the start-up figure reads."""

    def __init__(self, path: Path, arch: str) -> None:
        super().__init__(path, arch, _q4_k_m_mix)
        self._rng_vocab = random.Random(1234)

    def vocab(self) -> int:
        rng = self._rng_vocab
        symbols = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 256)]
        tokens = (symbols + [chr(256 + i) for i in range(256)])[:256]
        letters = "abcdefghijklmnopqrstuvwxyz"
        seen = set(tokens)
        while len(tokens) < N_VOCAB - N_SPECIAL:
            length = min(16, max(2, int(rng.gauss(6, 3))))
            word = ("Ġ" if rng.random() < 0.6 else "") + "".join(rng.choices(letters, k=length))
            if word not in seen:
                seen.add(word)
                tokens.append(word)
        tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tokens += [f"<|special_{i}|>" for i in range(N_SPECIAL - 3)]
        left, right = tokens[:4000], tokens[256:40000]
        merges = [f"{rng.choice(left)} {rng.choice(right)}" for _ in range(N_MERGES)]
        self.w.add_tokenizer_model("gpt2")
        self.w.add_tokenizer_pre("qwen35")
        self.w.add_token_list(tokens)
        self.w.add_token_types([1] * (N_VOCAB - N_SPECIAL) + [3] * N_SPECIAL)
        self.w.add_token_merges(merges)
        self.w.add_eos_token_id(tokens.index("<|im_end|>"))
        self.w.add_pad_token_id(tokens.index("<|endoftext|>"))
        self.w.add_add_bos_token(False)
        template = "{%- for message in messages %}{{ message.content }}{%- endfor %}\n"
        self.w.add_chat_template(template * 110)
        self.n_vocab = len(tokens)
        return self.n_vocab


def write_qwen35_9b(path: Path) -> int:
    """Write the bench model; return its header size in bytes."""
    g = geometry("qwen35", **QWEN35_9B)
    mw = Qwen35HeaderWriter(path, "qwen35")
    mw.w.add_name("Qwen3.5 9B (bench)")
    mw.w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    mw.w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    mw.vocab()
    build_gdn(mw, g)
    mw.write()
    from homelab.gguf.model_file import read_model

    return read_model(path).header.header_bytes


def _run(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Run ``argv`` once: (wall seconds, CPU seconds user+sys, exit code, stderr tail)."""
    started = time.perf_counter()
    child = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert child.stderr is not None
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    return (
        wall,
        usage.ru_utime + usage.ru_stime,
        child.returncode,
        err[-2000:].decode(errors="replace"),
    )


def _find_mdl(given: str | None) -> str | None:
    if given:
        return given if Path(given).exists() else None
    candidate = MDL_VENV / "bin" / "mdl"
    return str(candidate) if candidate.exists() else shutil.which("mdl")


def _report(times: dict[str, list[float]], what: str, repeat: int) -> None:
    medians = {label: statistics.median(values) for label, values in times.items()}
    print(f"{what}, median of {repeat} (min-max):")
    for label, value in medians.items():
        spread = f"{min(times[label]):.3f}-{max(times[label]):.3f}"
        print(f"  {label:<30} {value:7.3f} s   ({spread})")
    floor = medians[HEADER_FLOOR]
    for label in (VRAM, SNAP):
        line = f"  {label}: {medians[label] - floor:+.3f} s over the floor"
        if MDL in medians:
            ratio = medians[MDL] / medians[label]
            word, shown = ("faster", ratio) if ratio >= 1 else ("slower", 1 / ratio)
            line += f"; {shown:.2f}x {word} than {MDL} (goal: >= 2x faster)"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="median of N runs each (default 5)")
    parser.add_argument("--mdl", help=f"the mdl command (default {MDL_VENV}/bin/mdl or PATH)")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter that runs homelab (default: this one); homelab's runtime "
        "dependencies must be importable by it",
    )
    args = parser.parse_args()
    # Byte-code cached, as an installed package has it (pip compiles mdl on install).
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    ours_env = {**base_env, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="homelab-bench-") as folder:
        path = Path(folder) / "Qwen3.5-9B-Q4_K_M-bench.gguf"
        started = time.perf_counter()
        header_bytes = write_qwen35_9b(path)
        print(
            f"wrote {path.name} in {time.perf_counter() - started:.1f} s: header "
            f"{header_bytes / 1e6:.1f} MB, {N_VOCAB:,} tokens, {N_MERGES:,} merges, file "
            f"{path.stat().st_size / 1e9:.2f} GB (sparse)"
        )
        read_header = f"open({str(path)!r},'rb').read({header_bytes})"
        plan = [args.python, "-m", "homelab", "plan", str(path), "--json"]
        runs: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([args.python, "-c", "pass"], base_env),
            HEADER_FLOOR: ([args.python, "-c", read_header], base_env),
            VRAM: ([*plan, "--vram", "16GiB"], ours_env),
            SNAP: ([*plan, "--gpu-snapshot", str(SNAPSHOT)], ours_env),
        }
        mdl = _find_mdl(args.mdl)
        if mdl is None:
            print(f"mdl (llama-mdl 0.14) not found; install it with:\n  {MDL_INSTALL}")
        else:
            runs[MDL] = ([mdl, "fit", str(path), "--no-oracle", "--json"], base_env)
            mdl_python = Path(mdl).parent / "python"
            if mdl_python.exists():  # mdl's own interpreter (its venv)
                runs["mdl's python -c pass"] = ([str(mdl_python), "-c", "pass"], base_env)
        for label, (argv, env) in runs.items():  # warm the page cache, check each one works
            _, _, code, err = _run(argv, env)
            if code != 0:
                raise SystemExit(f"{label} failed (exit {code}):\n{err}")
        wall: dict[str, list[float]] = {label: [] for label in runs}
        cpu: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(args.repeat):
            for label, (argv, env) in runs.items():
                w, c, _, _ = _run(argv, env)
                wall[label].append(w)
                cpu[label].append(c)
    print(
        f"homelab ({args.python}) is engine-free here: --vram 16GiB (a synthetic card) or "
        f"--gpu-snapshot {SNAPSHOT.name} (a recorded card replayed): no NVML probe, no "
        f"llama-server. Runs interleaved; byte-code cached. The floor is {HEADER_FLOOR!r}."
    )
    _report(wall, "wall time", args.repeat)
    _report(cpu, "CPU time (user+sys; steadier on a busy machine)", args.repeat)


if __name__ == "__main__":
    main()
