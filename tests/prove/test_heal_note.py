"""The TUI's server panel line for the launch proof and a heal, from the session's events."""

from __future__ import annotations

from homelab.plan.calibration_miss import Setting
from homelab.serve import events as ev
from homelab.serve.prove import ProofResult
from homelab.ui.heal_note import heal_note

WAS, NOW = Setting(32, 32 * 8192, 3 << 30), Setting(16, 16 * 8192, 3 << 29)


def test_a_heal_says_what_ran_out_and_what_changed() -> None:
    said = "alloc_tensor_range: failed to allocate CPU buffer of size 3208642560"
    note = heal_note(ev.Healing("load", said, WAS, NOW, 1, 4))
    assert note is not None
    assert said in note and "(1/4)" in note
    assert "32 slot(s) × 8,192 tokens → 16 slot(s) × 8,192 tokens" in note
    done = heal_note(ev.Healed((WAS,), NOW, True))
    assert done is not None and "16 slot(s)" in done and "recorded for the next plan" in done
    assert "not recorded" in (heal_note(ev.Healed((WAS,), NOW, False, "read-only")) or "")


def test_a_proof_says_its_peak_against_the_plan() -> None:
    result = ProofResult(0, 8192, 8182, 2.5, "process", 100 << 20, 300 << 20, 400 << 20)
    note = heal_note(ev.Proved(result))
    assert note == "proved: 8,182 tokens in one slot in 2.5 s; peak 300.00 MiB (plan 400.00 MiB)"
    failed = ProofResult(
        0, 8192, 8182, 1.0, "card", None, None, None, oom="CUDA error: out of memory"
    )
    assert "launch proof failed: CUDA error: out of memory" in (heal_note(ev.Proved(failed)) or "")
    assert heal_note(ev.Stopped("stopped")) is None
