"""A served preset is served by its own name (``--alias``): the id ``/v1/models`` and every
hand-off say, from the CLI's serve, its dry run, and the TUI's preview alike. Planned with
the real planner on the real SmolLM2; hostile preset names give a clean id or fall back to
the model's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.llamacpp.served_id import MAX_ID_CHARS, served_id
from homelab.engine.options import plan_options
from homelab.gguf.model_file import read_model
from homelab.plan.card import card_for
from homelab.serve.prepare import prepare
from homelab.ui import backend
from tests.agents.test_served_id import CLEAN

GIB = 1 << 30


def alias_of(argv: tuple[str, ...] | list[str]) -> str:
    assert argv.count("--alias") == 1, argv  # llama-server keeps exactly one
    return argv[argv.index("--alias") + 1]


def test_a_preset_is_served_by_its_key_and_a_plain_file_by_its_gguf_name(
    smollm2_gguf: Path,
) -> None:
    options = plan_options(vram=8 * GIB, ctx=4096, slots=1)
    own = served_id(read_model(smollm2_gguf).metadata, str(smollm2_gguf))
    plain = prepare(str(smollm2_gguf), None, options)
    assert alias_of(plain.argv) == own and plain.plan.served_name is None
    preset = prepare(str(smollm2_gguf), None, options, served_name="smollm2-tiny")
    assert alias_of(preset.argv) == "smollm2-tiny"
    assert preset.plan.facts == plain.plan.facts  # the name changes nothing else
    tui = backend.prepare(str(smollm2_gguf), card_for(options), options, served_name="smollm2-tiny")
    assert alias_of(tui.argv) == "smollm2-tiny"  # the TUI's preview serves the same id


@pytest.mark.parametrize(
    "key",
    [
        "my preset,with commas",
        "../../etc/passwd",
        "evil\x00\x1b[31m\nname",
        "Ünïcødé 名前",
        "x" * 300,
    ],
)
def test_a_hostile_preset_name_gives_a_clean_bounded_id(key: str, smollm2_gguf: Path) -> None:
    got = served_id(read_model(smollm2_gguf).metadata, str(smollm2_gguf), key)
    assert CLEAN.match(got), got
    assert len(got) <= MAX_ID_CHARS and "," not in got and "/" not in got


def test_a_preset_name_with_nothing_usable_falls_back_to_the_models_id(smollm2_gguf: Path) -> None:
    metadata = read_model(smollm2_gguf).metadata
    own = served_id(metadata, str(smollm2_gguf))
    for key in ("", "/ ./..", "\x01\x02", "名前"):
        assert served_id(metadata, str(smollm2_gguf), key) == own, key
