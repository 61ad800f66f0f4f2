"""`homelab plan --gpu N,M`: a real GGUF split over two replayed cards, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.cli import main

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_split_over_two_cards_json(capsys, smollm2_gguf: Path) -> None:
    snapshot = str(FIXTURES / "constructed_mixed_24_12_display_small.json")
    code, out, _ = _plan(
        capsys, str(smollm2_gguf), "--gpu", "0,1", "--gpu-snapshot", snapshot, "--json"
    )
    assert code == 0
    data = json.loads(out)
    devices = data["devices"]
    assert [d["llama_device"] for d in devices] == ["CUDA1", "CUDA0"]  # the main card last
    assert sum(d["tensor_split"] for d in devices) == data["model"]["n_layer"] + 1
    argv = data["argv"]
    assert argv[argv.index("--device") + 1] == "CUDA1,CUDA0"
    assert argv[argv.index("--tensor-split") + 1] == ",".join(
        str(d["tensor_split"]) for d in devices
    )
    assert data["budget"]["total"] == sum(d["total"] for d in devices)
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in w for w in data["warnings"])


def test_plan_one_card_of_two_is_pinned(capsys, smollm2_gguf: Path) -> None:
    code, out, _ = _plan(
        capsys,
        str(smollm2_gguf),
        "--gpu",
        "1",
        "--gpu-snapshot",
        str(FIXTURES / "constructed_two_equal.json"),
    )
    assert code == 0
    last = out.strip().splitlines()[-1]
    assert "--device CUDA1" in last and "--tensor-split" not in last


@pytest.mark.parametrize("value", ["0,0", "a", "0,-1", "1,,2"])
def test_bad_gpu_lists_are_usage_errors(capsys, smollm2_gguf: Path, value: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", str(smollm2_gguf), "--gpu", value, "--vram", "8GiB"])
    assert caught.value.code == 2
    assert "--gpu" in capsys.readouterr().err


def test_a_card_that_is_not_there(capsys, smollm2_gguf: Path) -> None:
    snapshot = str(FIXTURES / "constructed_two_equal.json")
    code, _, err = _plan(capsys, str(smollm2_gguf), "--gpu", "0,3", "--gpu-snapshot", snapshot)
    assert code != 0 and "there is no GPU 3" in err
