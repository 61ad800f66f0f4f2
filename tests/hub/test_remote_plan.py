"""`homelab plan REPO:QUANT`: the same plan as for the local file, from header bytes only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_fixtures import point_hf_at, recorded, settled, write_big_vocab_gguf, write_split_gguf

from homelab.cli import main
from homelab.gguf.model_file import read_model
from homelab.gguf.source import FIRST_CHUNK
from homelab.hub.model_ref import resolve_model_ref
from tests.hubstub import HubStub

REPO = "tester/BigVocab-GGUF"
FILE = "BigVocab-F16.gguf"
SPLIT = [f"BigVocab-Q8_0-0000{i}-of-00002.gguf" for i in (1, 2)]
SNAPSHOT = Path(__file__).parent.parent / "fixtures" / "gpu" / "rtx3090_wayland.json"
PLAN_OPTIONS = ["--gpu-snapshot", str(SNAPSHOT), "--workload", "chat"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bigvocab")
    split = write_split_gguf(folder / "BigVocab-Q8_0.gguf", 2, weight_type="q8_0")
    return {FILE: write_big_vocab_gguf(folder / FILE), SPLIT[0]: split[0], SPLIT[1]: split[1]}


@pytest.fixture
def hub(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HubStub]:
    with HubStub({REPO: files}) as stub:
        point_hf_at(stub, monkeypatch, tmp_path / "hf-home")
        yield stub


def _plan_json(capsys: pytest.CaptureFixture[str], model: str, *extra: str) -> tuple[int, dict]:
    code = main(["plan", model, *PLAN_OPTIONS, *extra, "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, json.loads(out) if out.strip() else {}


def _without_path(plan: dict) -> dict:
    """The plan with the model's name taken out: a local path (``-m PATH``) and a model that is
    not downloaded yet (``-hf REPO:QUANT``, fetched by llama-server itself) compare equal."""
    plan = json.loads(json.dumps(plan))
    path = plan["model"].pop("path")
    argv = ["<model>" if arg == path else arg for arg in plan["argv"]]
    if "-hf" in argv:
        i = argv.index("-hf")
        argv[i : i + 2] = ["-m", "<model>"]
    plan["argv"] = argv
    return plan


@pytest.mark.parametrize(("ref", "local_name"), [(f"{REPO}:F16", FILE), (f"{REPO}:q8_0", SPLIT[0])])
def test_remote_plan_equals_the_local_plan(
    hub: HubStub, files: dict[str, Path], capsys, ref: str, local_name: str
) -> None:
    local_code, local = _plan_json(capsys, str(files[local_name]))
    remote_code, remote = _plan_json(capsys, ref)
    assert remote_code == local_code == 0
    assert remote["model"]["path"] == hub.resolve_url(REPO, local_name)
    assert _without_path(remote) == _without_path(local)
    hf = remote["argv"][remote["argv"].index("-hf") + 1]
    assert hf.startswith(f"{REPO}:") and hf.split(":")[1].lower() == ref.split(":")[1].lower()
    assert remote["weights_bytes"] == read_model(files[local_name]).weights_bytes


def test_a_remote_plan_reads_only_the_header(hub: HubStub, files: dict[str, Path]) -> None:
    local = read_model(files[FILE]).header
    file_size = files[FILE].stat().st_size
    assert local.header_bytes > 1_000_000 and file_size > 4 * local.header_bytes  # a telling case

    resolved = resolve_model_ref(f"{REPO}:F16")
    [part] = resolved.parts
    gets = recorded(hub, lambda r: r.method == "GET" and r.host == "cdn")
    sent = sum(r.bytes_sent for r in gets)
    assert sent == part.bytes_fetched
    assert sent <= 1.1 * local.header_bytes + FIRST_CHUNK
    ends = [int(r.range.split("-")[1]) for r in gets]
    assert max(ends) < local.data_offset + FIRST_CHUNK  # the 7.8 MB of weights are never read
    api = [r for r in settled(hub) if r.host == "hub" and r.path.startswith("/api/")]
    assert sum(r.bytes_sent for r in api) < 8_000  # the listing: names, sizes, hashes


def test_split_parts_are_all_read_with_header_bytes_only(
    hub: HubStub, files: dict[str, Path]
) -> None:
    resolved = resolve_model_ref(f"{REPO}:Q8_0")
    assert [p.filename for p in resolved.parts] == SPLIT
    for name, part in zip(SPLIT, resolved.parts, strict=True):
        header = read_model(files[SPLIT[0]]).parts[SPLIT.index(name)]
        assert part.origin == "remote"
        assert part.bytes_fetched <= 1.1 * header.header_bytes + FIRST_CHUNK


def test_second_plan_needs_no_header_bytes(hub: HubStub, capsys) -> None:
    _plan_json(capsys, f"{REPO}:F16")
    first = settled(hub)
    code, plan = _plan_json(capsys, f"{REPO}:F16")
    assert code == 0 and plan["model"]["arch"] == "llama"
    new = settled(hub)[len(first) :]
    assert [r for r in new if r.filename == FILE] == []
    assert all(r.path.startswith("/api/") for r in new)  # only the listing (is main still there?)


def test_offline_plan_from_the_header_cache(
    hub: HubStub, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, online = _plan_json(capsys, f"{REPO}:F16")
    hub.close()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, offline = _plan_json(capsys, f"{REPO}:F16")
    assert code == 0 and offline == online


def test_offline_without_cache_is_a_clear_error(
    hub: HubStub, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = main(["plan", f"{REPO}:F16", *PLAN_OPTIONS])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.startswith("homelab: Offline: HF_HUB_OFFLINE is set")
    assert "homelab plan tester/BigVocab-GGUF:QUANT" in err and "Traceback" not in err
    assert settled(hub) == []


@pytest.mark.parametrize(
    ("ref", "code", "words"),
    [
        (f"{REPO}:Q2_K", 1, "has no quant Q2_K; it has: F16"),
        ("tester/Nope-GGUF:Q4_K_M", 1, "no repository tester/Nope-GGUF"),
        ("owner/na me:Q4", 2, "cannot read the model reference"),
    ],
)
def test_plan_errors_exit_cleanly(hub: HubStub, capsys, ref: str, code: int, words: str) -> None:
    assert main(["plan", ref, *PLAN_OPTIONS]) == code
    _, err = capsys.readouterr()
    assert words in err and "Traceback" not in err


def test_a_missing_local_path_is_still_a_bad_model_file(
    hub: HubStub, capsys, tmp_path: Path
) -> None:
    assert main(["plan", str(tmp_path / "gone" / "Model-Q4_K_M.gguf"), *PLAN_OPTIONS]) == 4
    assert "no such file" in capsys.readouterr().err
    assert settled(hub) == []
