"""`homelab quants` on a MoE repo: each quant weighed with the offload ladder.

Generated qwen3moe GGUFs (experts large enough to matter) of three quant types are served by
the Hub stand-in and read by range requests, as on the real Hub. On the card the test finds
(the smallest where Q4_0 serves the workload whole), Q4_1 and Q8_0 serve it only with the
experts of some layers in RAM: Q8_0 ranks first (more bits), Q4_0 before Q4_1 (same width,
nothing in RAM); with the ladder switched off (``--n-cpu-moe 0``) the pick is Q4_0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_fixtures import point_hf_at

from homelab.cli import main
from homelab.engine.options import plan_options
from homelab.gguf.model_file import read_model
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.hub.model_ref import DEFAULT_REVISION, list_repo
from homelab.plan.planner import PlanRequest, make_plan
from homelab.plan.workload import parse_workload
from homelab.serve.quant_fit import fit_quants
from homelab.serve.quant_rank import pick_best, ranked, rung_of
from homelab.units import GiB, format_bytes
from tests.factory import write_gguf
from tests.hubstub import HubStub

REPO, SOLO, DENSE = "tester/Moe-GGUF", "tester/Moe-Solo-GGUF", "tester/Dense-GGUF"
UNTAGGED = "tester/Moe-Untagged-GGUF"
WORKLOAD = "8192"
MOE = {
    "n_layer": 8,
    "n_embd": 256,
    "n_head": 4,
    "n_head_kv": 2,
    "head_dim": 64,
    "n_expert": 8,
    "n_expert_used": 2,
    "n_ff_exp": 512,
    "n_ctx_train": 32768,
}
PLENTY = CpuMemory(total=64 * GiB, available=48 * GiB)
SCARCE = CpuMemory(total=8 * GiB, available=1 << 20)
"""1 MiB free: no quant's experts fit in RAM."""
_EXPERT = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down)_exps\.")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("moe")
    return {
        f"Moe-{tag}.gguf": write_gguf(
            "qwen3moe", folder / f"Moe-{tag}.gguf", weight_type=tag.lower(), **MOE
        )
        for tag in ("Q4_0", "Q4_1", "Q8_0")
    }


def _plan(path: Path, vram: int, n_cpu_moe: int | None = None):
    request = PlanRequest(workload=parse_workload(WORKLOAD), n_cpu_moe=n_cpu_moe)
    return make_plan(
        read_model(path), path.name, synthetic_report(vram), request, ram=lambda: PLENTY
    )


def _whole_on_card(path: Path, vram: int) -> bool:
    try:
        plan = _plan(path, vram, 0)
    except Exception:  # DoesNotFitError: too small a card
        return False
    return plan.verdict == "fits" and plan.candidate.allocation.ctx_per_slot >= int(WORKLOAD)


@pytest.fixture(scope="module")
def vram(files: dict[str, Path]) -> int:
    """The smallest card (to 64 KiB) where Q4_0 serves the workload whole on the card."""
    lo, hi = 256 << 20, 4 * GiB
    assert _whole_on_card(files["Moe-Q4_0.gguf"], hi)
    while hi - lo > 64 << 10:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _whole_on_card(files["Moe-Q4_0.gguf"], mid) else (mid, hi)
    assert not _whole_on_card(files["Moe-Q4_1.gguf"], hi), "Q4_1 fits whole too: no ladder"
    return hi


@pytest.fixture
def hub(files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    dense = write_gguf("llama", tmp_path / "Dense-Q8_0.gguf", weight_type="q8_0", n_layer=4)
    repos = {
        REPO: {**files, "README.md": b"# Moe\n"},
        SOLO: {"Moe-Q8_0.gguf": files["Moe-Q8_0.gguf"]},
        DENSE: {"Dense-Q8_0.gguf": dense},
        UNTAGGED: {"Moe.gguf": files["Moe-Q8_0.gguf"], "Moe-Q4_1.gguf": files["Moe-Q4_1.gguf"]},
    }
    with HubStub(repos) as stub:
        point_hf_at(stub, monkeypatch, tmp_path / "hf-home")
        yield


def _experts_of_first(path: Path, n: int) -> int:
    """The routed experts' bytes of blocks 0..n-1, summed from the file's own tensor table."""
    return sum(
        t.n_bytes or 0
        for t in read_model(path).tensors
        if (m := _EXPERT.match(t.name)) and int(m.group(1)) < n
    )


def _quants(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["quants", *args, "--workload", WORKLOAD])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out


def test_a_wider_quant_with_experts_in_ram_beats_a_narrower_one_whole(
    hub: None, files: dict[str, Path], vram: int, capsys
) -> None:
    code, out = _quants(capsys, REPO, "--vram", str(vram), "--json")
    data = json.loads(out)
    rows = {row["quant"]: row for row in data["quants"]}
    assert code == 0 and data["best"] == "Q8_0"
    assert data["ranking"] == ["Q8_0", "Q4_0", "Q4_1"]  # same width: nothing in RAM first
    assert [rows[q]["rank"] for q in ("Q8_0", "Q4_0", "Q4_1")] == [1, 2, 3]
    assert rows["Q4_0"]["rung"] == "card" and rows["Q4_0"]["placement"] == "whole on card"
    assert rows["Q4_0"]["n_cpu_moe"] == 0 and rows["Q4_0"]["ram"]["experts"] == 0
    assert rows["Q4_1"]["size_bytes"] > rows["Q4_0"]["size_bytes"]  # bigger, yet second
    for quant in ("Q4_1", "Q8_0"):
        row, local = rows[quant], _plan(files[f"Moe-{quant}.gguf"], vram)
        n = local.weights.n_cpu_moe
        assert row["rung"] == "experts" and row["n_cpu_moe"] == n > 0
        assert row["placement"] == f"experts of {n} layer{'s' * (n > 1)} in RAM"
        assert row["ram"]["experts"] == _experts_of_first(files[f"Moe-{quant}.gguf"], n)
        assert row["full_slots"] >= 1 and row["verdict"] == "fits"
        assert row["rung_reason"] and "in RAM" in row["rung_reason"]
    assert rows["Q8_0"]["bits"] == 8 and rows["Q4_1"]["bits"] == 4
    assert "Q8_0 is the largest quant" in data["why"] and "experts of" in data["why"]
    assert "at 8 bits it ranks above Q4_0 (4-bit), which fits whole on the card" in data["why"]


def test_the_ladder_is_what_changes_the_pick(hub: None, vram: int, capsys) -> None:
    code, out = _quants(capsys, REPO, "--vram", str(vram), "--n-cpu-moe", "0", "--json")
    data = json.loads(out)
    assert code == 0 and data["best"] == "Q4_0" and data["ranking"] == ["Q4_0"]
    others = [row for row in data["quants"] if row["quant"] != "Q4_0"]
    assert all(row["rank"] is None and not row["n_cpu_moe"] for row in others)
    assert all(row["rung"] in ("layers", None) or not row["full_slots"] for row in others)


def test_the_table_shows_each_rung_and_its_ram_side(hub: None, vram: int, capsys) -> None:
    code, out = _quants(capsys, REPO, "--vram", str(vram))
    lines = out.splitlines()
    assert code == 0 and lines[1].split()[-2:] == ["PLACEMENT", "RAM"]
    q4, q8 = (next(line for line in lines if f" {tag} " in line) for tag in ("Q4_0", "Q8_0"))
    assert "whole on card" in q4 and q4.rstrip().endswith("-")
    assert q8.startswith("*") and re.search(r"experts of \d+ layers? in RAM +[\d.]+ [KMG]i?B$", q8)


def test_one_quant_only(hub: None, vram: int, capsys) -> None:
    code, out = _quants(capsys, SOLO, "--vram", str(vram), "--json")
    data = json.loads(out)
    assert code == 0 and data["ranking"] == ["Q8_0"]
    assert data["quants"][0]["rung"] == "experts"
    assert data["why"].endswith("; it is the largest quant in the repo.")


def test_a_name_without_a_quant_is_weighed_by_its_header_bits(hub: None, vram: int, capsys) -> None:
    code, out = _quants(capsys, UNTAGGED, "--vram", str(vram), "--json")
    rows = {row["quant"]: row for row in json.loads(out)["quants"]}
    assert code == 0 and rows["Moe.gguf"]["bits"] == 8  # Q8_0's 8.5 bits per weight, rounded down
    assert rows["Q4_1"]["bits"] == 4  # the name's, though its header says 5.0
    assert json.loads(out)["ranking"] == ["Moe.gguf", "Q4_1"]


def test_experts_that_do_not_fit_in_ram_step_down_and_lose_the_rank(hub: None, vram: int) -> None:
    listing = list_repo(REPO, DEFAULT_REVISION)
    options = plan_options(workload=WORKLOAD, vram=vram)
    report = synthetic_report(vram)
    fits = {f.label: f for f in fit_quants(listing, report, options, ram=lambda: SCARCE)}
    best = pick_best(list(fits.values()))
    assert best is not None and best.label == "Q4_0"
    assert [f.label for f in ranked(list(fits.values()))] == ["Q4_0"]
    for quant in ("Q4_1", "Q8_0"):
        fit = fits[quant].fit
        assert fit.full_slots == 0 or fit.verdict == "partial"
        if fit.plan is not None:  # whole layers off, or a short conversation on the card
            assert rung_of(fit.plan).kind in ("layers", "card") and fit.plan.weights.n_cpu_moe == 0
            note = fit.plan.warnings[0]
        else:
            note = fit.hint or ""
        assert f"{format_bytes(SCARCE.available)} available" in note and "= 0 B" in note


def test_a_dense_repo_has_no_ladder_and_its_table_no_placement(hub: None, capsys) -> None:
    code, out = _quants(capsys, DENSE, "--vram", "16GiB")
    assert code == 0 and "PLACEMENT" not in out and "Best: Q8_0" in out
    _, out = _quants(capsys, DENSE, "--vram", "16GiB", "--json")
    row = json.loads(out)["quants"][0]
    assert row["rung"] == "card" and row["n_cpu_moe"] == 0 and row["rank"] == 1


def test_the_table_says_why_experts_stayed_on_the_card(
    hub: None, vram: int, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from homelab.gpu import cpu

    monkeypatch.setattr(cpu, "cpu_memory", lambda: SCARCE)  # psutil's figure, held still
    code, out = _quants(capsys, REPO, "--vram", str(vram))
    assert code == 0 and "Best: Q4_0" in out
    for quant in ("Q4_1", "Q8_0"):
        note = next(line for line in out.splitlines() if line.startswith(f"  {quant}: "))
        assert f"{format_bytes(SCARCE.available)} available" in note and "= 0 B" in note
