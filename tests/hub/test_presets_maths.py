"""The maths quoted in each shipped preset's comments agrees with homelab's KV arithmetic.

Every shipped preset justifies itself with "... = N B/token" (q8_0 K and V). Here N is
recomputed from the model's published geometry (``preset_geometry``) with the planner's
own ``kv_allocation``, and the arch the preset names is the geometry's arch. A rule change
in ``homelab.gguf.archs`` or a typo in a comment fails this test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from preset_geometry import GEOMETRY

from homelab.gguf.geometry import geometry_of
from homelab.hub.presets import load_presets
from homelab.plan.kv import KvSettings, kv_allocation

PRESETS = {p.key: p for p in load_presets(user_dir=None)}
_CLAIM = re.compile(r"=\s*([\d,]+)\s*B/token")


def test_every_shipped_preset_has_its_geometry_here() -> None:
    assert sorted(GEOMETRY) == sorted(PRESETS)


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_quoted_kv_bytes_per_token_match_the_geometry(key: str) -> None:
    preset = PRESETS[key]
    comments = "\n".join(
        line for line in Path(preset.source).read_text().splitlines() if line.startswith("#")
    )
    claims = [int(c.replace(",", "")) for c in _CLAIM.findall(comments)]
    assert claims, f"{preset.source}: no '= N B/token' in the comments"
    geometry = geometry_of(GEOMETRY[key]())
    assert geometry.arch == preset.arch
    allocation = kv_allocation(
        geometry, KvSettings(n_ctx=131_072, n_seq=1, type_k="q8_0", type_v="q8_0")
    )
    assert claims[0] == allocation.bytes_per_token


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_quoted_weights_and_card_lines_are_present(key: str) -> None:
    text = Path(PRESETS[key].source).read_text()
    assert re.search(r"^#\s+weights\s+\S+", text, re.MULTILINE), "no weights line"
    assert re.search(r"^#\s+(16|24) GB card", text, re.MULTILINE), "no per-card line"
    assert "(--vram" in text, "card figures must say how they were planned"
