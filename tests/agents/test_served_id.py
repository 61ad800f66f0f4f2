"""The served model id (``--alias``): clean whatever the GGUF's name, and what ``/v1/models``
and every hand-off say, instead of the GGUF's path.

The names are read from real GGUFs (SmolLM2, and tiny ones tests/factory writes with the
names under test); the end-to-end case serves one of them with the real llama-server
through ``homelab serve`` and its gate.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from homelab.engine.llamacpp.served_id import FALLBACK_ID, MAX_ID_CHARS, clean_id, served_id
from homelab.engine.supervision.state_file import StateFile
from homelab.gguf.model_file import read_model
from tests.agents.test_agent_cli import exports, homelab
from tests.engine.supervisor_child import serve_on_a_free_port
from tests.factory import write_gguf

CLEAN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
HOSTILE = {
    "slashes": "meta-llama/Llama-3.1-8B-Instruct",
    "a path": "/home/me/models/../secret/model.gguf",
    "control characters": "evil\x00\x1b[31m\nname\r\t,with,commas",
    "500 characters": "A" * 250 + " b" * 125,
    "nothing usable": "/ ./.. \\ \x01",
}


def id_of(folder: Path, file: str, name: str | None) -> str:
    path = write_gguf("llama", folder / file, name=name)
    return served_id(read_model(path).metadata, str(path))


def test_smollm2_is_named_by_its_gguf_name_and_quant(smollm2_gguf: Path) -> None:
    metadata = read_model(smollm2_gguf).metadata
    name = metadata["general.name"]
    got = served_id(metadata, str(smollm2_gguf))
    assert got == clean_id(name) + "-Q4_1"  # the file's quant, which its name lacks
    assert CLEAN.match(got) and str(smollm2_gguf.parent) not in got


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_name_gives_a_clean_bounded_id(case: str, tmp_path: Path) -> None:
    got = id_of(tmp_path, "Some-Model.Q8_0.gguf", HOSTILE[case])
    assert CLEAN.match(got), got
    assert len(got) <= MAX_ID_CHARS and "," not in got and "/" not in got
    assert got.endswith("Q8_0")  # the quant, from the file name
    if case == "slashes":
        assert got == "Llama-3.1-8B-Instruct-Q8_0"  # the name after its owner
    if case == "a path":
        assert got == "model.gguf-Q8_0"  # the path's last part, never the folders
    if case == "nothing usable":
        assert got == "Some-Model.Q8_0"  # the file's own name, its quant already in it


def test_no_name_falls_back_to_the_file_name_then_to_a_word(tmp_path: Path) -> None:
    assert id_of(tmp_path, "tiny-7B-Q4_K_M-00001-of-00001.gguf", None) == "tiny-7B-Q4_K_M"
    assert id_of(tmp_path, "-.gguf", None) == FALLBACK_ID
    assert served_id({"general.name": 7}, "/m/x y.gguf") == "x-y"  # not a string: unused
    assert served_id(None, "/m/my-model.gguf") == "my-model"  # "MODEL" is no quant


def test_two_models_of_one_name(tmp_path: Path) -> None:
    """Two quants of one model are told apart; two files of the same name and quant get
    the same id (one engine serves one model: the id is stable, the record keeps the path)."""
    q4 = id_of(tmp_path, "Same.Q4_K_M.gguf", "Same Model")
    q8 = id_of(tmp_path, "Same.Q8_0.gguf", "Same Model")
    assert (q4, q8) == ("Same-Model-Q4_K_M", "Same-Model-Q8_0")
    (tmp_path / "other").mkdir()
    assert id_of(tmp_path / "other", "Same.Q4_K_M.gguf", "Same Model") == q4
    assert id_of(tmp_path, "x.gguf", "Same Model Q4_K_M") == "Same-Model-Q4_K_M"  # no twice


@pytest.mark.engine
def test_the_served_id_is_what_models_and_every_hand_off_say(
    llama_server_bin: Path, engines, tmp_path: Path
) -> None:
    model = write_gguf("llama", tmp_path / "tiny.Q8_0.gguf", name=HOSTILE["control characters"])
    served, _ = serve_on_a_free_port(str(model), "--vram", "8GiB", "--ctx", "512", "--detach")
    record = StateFile().read()
    if record is not None:
        engines.track(record.pid)
    try:
        assert served.returncode == 0, served.stderr
        assert record is not None and record.model == str(model)  # the record keeps the path
        want = served_id(read_model(model).metadata, str(model))
        assert want == "evil-31m-name-with-commas-Q8_0"
        assert record.gate_url is not None
        listed = httpx.get(f"{record.gate_url}/v1/models", timeout=10, trust_env=False).json()
        assert [m["id"] for m in listed["data"]] == [want]
        home = tmp_path / "home"
        home.mkdir()
        claude = exports(homelab("agent", "claude", "--print", env={"HOME": str(home)}).stdout)
        assert {claude[k] for k in claude if k.endswith("MODEL")} == {want}
        opencode = homelab("agent", "opencode", "--print", env={"HOME": str(home)})
        config = json.loads(exports(opencode.stdout)["OPENCODE_CONFIG_CONTENT"])
        assert config["model"] == f"homelab/{want}" and list(
            config["provider"]["homelab"]["models"]
        ) == [want]
        codex = homelab("agent", "codex", "--print", env={"HOME": str(home)}).stdout
        assert f"model={json.dumps(want)}" in codex
    finally:
        stopped = homelab("stop")
        assert stopped.returncode == 0, stopped.stderr
