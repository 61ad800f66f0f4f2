"""`quants_on_card`, the pass `homelab quants` and the TUI's chooser share: what it gives
is what the CLI prints, and `download_ref` downloads exactly the quant chosen (a split one
with all its parts), from the local Hub stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.options import plan_options
from homelab.hub.download import pull
from homelab.serve.quant_choice import download_ref, quants_on_card
from homelab.units import parse_size
from tests.hub.test_quants_cmd import REPO, SPLIT, WORKLOAD, files, hub, telling_vram  # noqa: F401


def test_the_cli_prints_what_the_domain_pass_gives(
    hub,  # noqa: F811
    telling_vram: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    options = plan_options(workload=WORKLOAD, vram=parse_size(telling_vram))
    judged = quants_on_card(REPO, "main", options)
    main(["quants", REPO, "--vram", telling_vram, "--workload", WORKLOAD, "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["best"] == judged.best.label == "Q8_0"
    assert printed["ranking"] == [q.label for q in judged.order]
    assert printed["why"] == judged.why
    assert [(q["quant"], q["verdict"], q["size_bytes"]) for q in printed["quants"]] == [
        (q.label, q.fit.verdict, q.size) for q in judged.fits
    ]


def test_download_ref_brings_every_part_of_the_chosen_quant(
    hub,  # noqa: F811
    telling_vram: str,  # noqa: F811
) -> None:
    judged = quants_on_card(REPO, "main", plan_options(vram=parse_size(telling_vram)))
    q8 = next(q for q in judged.fits if q.label == "Q8_0")
    ref = download_ref(judged.listing, q8)
    assert ref == f"{REPO}/{SPLIT[0]}"
    paths = pull(ref, mmproj=False).paths
    assert [p.name for p in paths] == [Path(s).name for s in SPLIT]
    assert [p.stat().st_size for p in paths] == [f.size for f in q8.choice.files]
