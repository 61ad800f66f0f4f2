"""`homelab quants REPO`: every quant planned from its header on the card, the best one marked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_fixtures import point_hf_at, settled, write_split_gguf

from homelab.cli import main
from homelab.errors import DoesNotFitError
from homelab.gguf.model_file import read_model
from homelab.gpu.report import synthetic_report
from homelab.plan.planner import PlanRequest, make_plan
from homelab.plan.workload import parse_workload
from tests.factory import write_gguf
from tests.hubstub import HubStub

REPO = "tester/Mid-GGUF"
WORKLOAD = "8192"
GEOMETRY = {"n_layer": 4, "n_embd": 512, "n_ff": 1024}
SPLIT = [f"Q8_0/Mid-Q8_0-0000{i}-of-00002.gguf" for i in (1, 2)]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Q4_0 and F16 single files, Q8_0 in two parts, and a projector that is not a model."""
    folder = tmp_path_factory.mktemp("mid")
    split = write_split_gguf(folder / "Mid-Q8_0.gguf", 2, weight_type="q8_0", **GEOMETRY)
    f16 = write_gguf("llama", folder / "Mid-F16.gguf", **GEOMETRY)
    return {
        "Mid-Q4_0.gguf": write_gguf(
            "llama", folder / "Mid-Q4_0.gguf", weight_type="q4_0", **GEOMETRY
        ),
        "Mid-F16.gguf": f16,
        SPLIT[0]: split[0],
        SPLIT[1]: split[1],
        "mmproj-Mid-F16.gguf": f16,
        "README.md": b"# Mid\n",
    }


@pytest.fixture(scope="module")
def telling_vram(files: dict[str, Path]) -> str:
    """A card size where the choice is not trivial: F16 fits without a whole conversation
    (or only partly), Q8_0 fits with one, found with the planner on the local files."""
    request = PlanRequest(workload=parse_workload(WORKLOAD))
    f16, q8 = read_model(files["Mid-F16.gguf"]), read_model(files[SPLIT[0]])
    for mib in range(900, 2000, 4):
        report = synthetic_report(mib * 1024**2)
        try:
            big, mid = make_plan(f16, "f16", report, request), make_plan(q8, "q8", report, request)
        except DoesNotFitError:
            continue
        big_full = big.verdict == "fits" and big.candidate.allocation.ctx_per_slot >= int(WORKLOAD)
        mid_full = mid.verdict == "fits" and mid.candidate.allocation.ctx_per_slot >= int(WORKLOAD)
        if mid_full and not big_full:
            return f"{mib}MiB"
    pytest.fail("no card size between 900 MiB and 2 GiB separates F16 from Q8_0")


@pytest.fixture
def hub(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HubStub]:
    with HubStub(
        {REPO: files, "tester/Docs-Only": {"README.md": b"no weights"}, "tester/Gated-GGUF": files},
        gated={"tester/Gated-GGUF"},
    ) as stub:
        point_hf_at(stub, monkeypatch, tmp_path / "hf-home")
        yield stub


def _quants(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["quants", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _local_plan(capsys: pytest.CaptureFixture[str], path: Path, vram: str) -> dict:
    assert main(["plan", str(path), "--vram", vram, "--workload", WORKLOAD, "--json"]) in (0, 3)
    return json.loads(capsys.readouterr().out)


def test_every_quant_is_planned_like_homelab_plan_and_the_best_is_marked(
    hub: HubStub, files: dict[str, Path], telling_vram: str, capsys
) -> None:
    code, out, _ = _quants(capsys, REPO, "--vram", telling_vram, "--workload", WORKLOAD, "--json")
    assert code == 0
    data = json.loads(out)
    rows = {row["quant"]: row for row in data["quants"]}
    assert [row["quant"] for row in data["quants"]] == ["Q4_0", "Q8_0", "F16"]  # smallest first
    assert rows["Q8_0"]["files"] == SPLIT
    assert rows["Q8_0"]["size_bytes"] == sum(files[name].stat().st_size for name in SPLIT)
    for quant, local_file in (
        ("Q4_0", "Mid-Q4_0.gguf"),
        ("Q8_0", SPLIT[0]),
        ("F16", "Mid-F16.gguf"),
    ):
        local = _local_plan(capsys, files[local_file], telling_vram)
        row = rows[quant]
        assert row["verdict"] == local["verdict"]
        assert (row["slots"], row["ctx_per_slot"], row["tokens_fit"]) == (
            local["parallel"],
            local["ctx_per_slot"],
            local["tokens_fit"],
        )
        assert row["weights_bytes"] == local["weights_bytes"]
        assert row["header_source"] == "remote"
    assert data["best"] == "Q8_0" and rows["Q8_0"]["best"] and not rows["F16"]["best"]
    assert rows["Q8_0"]["full_slots"] >= 1 and rows["F16"]["full_slots"] in (0, None)
    assert data["why"].startswith("Q8_0 is the largest quant that fits with whole conversations")
    assert "the next larger, F16," in data["why"]
    assert data["bytes_fetched"] > 0 and data["device"].startswith("GPU 0: synthetic")


def test_the_human_table(hub: HubStub, telling_vram: str, capsys) -> None:
    code, out, _ = _quants(capsys, REPO, "--vram", telling_vram, "--workload", WORKLOAD)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{REPO} at main (") and "3 quant(s)" in lines[0]
    assert lines[1].split() == [
        "QUANT",
        "SIZE",
        "FIT",
        "FULL",
        "SLOTS",
        "TOKENS/SLOT",
        "TOKENS",
        "FIT",
    ]
    marked = [line for line in lines if line.startswith("*")]
    assert len(marked) == 1 and marked[0].split()[1:3] == ["Q8_0", "(2"]
    assert any(line.startswith("Best: Q8_0 is the largest") for line in lines)
    assert "nothing was downloaded" in lines[-1]


def test_headers_come_from_the_cache_the_second_time(
    hub: HubStub, telling_vram: str, capsys
) -> None:
    _quants(capsys, REPO, "--vram", telling_vram, "--workload", WORKLOAD)
    before = len(settled(hub))
    code, out, _ = _quants(capsys, REPO, "--vram", telling_vram, "--workload", WORKLOAD, "--json")
    data = json.loads(out)
    assert code == 0 and data["bytes_fetched"] == 0
    assert {row["header_source"] for row in data["quants"]} == {"header-cache"}
    new = settled(hub)[before:]
    assert new and all(r.path.startswith("/api/") for r in new)


def test_offline_lists_what_is_cached(hub: HubStub, telling_vram: str, capsys, monkeypatch) -> None:
    main(["plan", f"{REPO}:Q4_0", "--vram", telling_vram, "--json"])
    capsys.readouterr()
    hub.close()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, _ = _quants(capsys, REPO, "--vram", telling_vram, "--workload", WORKLOAD)
    assert code == 0
    assert "! HF_HUB_OFFLINE is set: only what is cached on this machine is listed" in out
    assert "1 quant(s)" in out and "Best: Q4_0" in out
    code, _, err = _quants(capsys, "tester/Other-GGUF", "--vram", telling_vram)
    assert code == 1 and "nothing of tester/Other-GGUF" in err


def test_nothing_fits_exits_3(hub: HubStub, capsys) -> None:
    code, out, _ = _quants(capsys, REPO, "--vram", "700MiB", "--workload", WORKLOAD, "--json")
    data = json.loads(out)
    assert code == 3 and data["best"] is None
    assert {row["verdict"] for row in data["quants"]} == {"does_not_fit"}
    assert all(row["reason"] for row in data["quants"])
    assert data["why"].startswith("No quant fits")


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        ([f"{REPO}:Q4_0"], 2, "takes a Hugging Face repo"),
        (["tester/Docs-Only"], 1, "has no GGUF model files"),
        (["tester/Nope-GGUF"], 1, "no repository tester/Nope-GGUF"),
        (["tester/Gated-GGUF"], 1, "HF_TOKEN"),
        ([REPO, "--workload", "lots"], 2, "unknown workload"),
    ],
)
def test_errors(hub: HubStub, capsys, args: list[str], code: int, words: str) -> None:
    got, _, err = _quants(capsys, *args, "--vram", "16GiB")
    assert got == code and words in err and err.startswith("homelab: ")
