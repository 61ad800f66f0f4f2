"""The words for the launch proof and a heal, from the session's events (the CLI prints
them, the TUI's server panel notes them)."""

from __future__ import annotations

from homelab.plan.calibration_miss import Setting
from homelab.serve import events as ev
from homelab.serve.describe import describe
from homelab.serve.prove import ProofResult

WAS, NOW = Setting(32, 32 * 8192, 3 << 30), Setting(16, 16 * 8192, 3 << 29)


def test_a_heal_says_what_ran_out_and_what_changed() -> None:
    said = "alloc_tensor_range: failed to allocate CPU buffer of size 3208642560"
    note = describe(ev.Healing("load", said, WAS, NOW, 1, 4)).line
    assert note is not None
    assert said in note and "1/4" in note
    assert "32 slots × 8,192 tokens → 16 slots × 8,192 tokens" in note
    done = describe(ev.Healed((WAS,), NOW, True)).line
    assert done is not None and "16 slots" in done and "the next plan starts there" in done
    not_kept = describe(ev.Healed((WAS,), NOW, False, "read-only")).line or ""
    assert "not recorded: read-only" in not_kept


def test_a_proof_says_its_peak_against_the_plan() -> None:
    result = ProofResult(0, 8192, 8182, 2.5, "process", 100 << 20, 300 << 20, 400 << 20)
    note = describe(ev.Proved(result)).line
    assert note == (
        "proved in 2.5 s: 8,182 tokens; the engine's RSS 100.00 MiB → peak 300.00 MiB "
        "(plan: 400.00 MiB)"
    )
    failed = ProofResult(
        0, 8192, 8182, 1.0, "card", None, None, None, oom="CUDA error: out of memory"
    )
    assert "proof failed after 1.0 s: CUDA error: out of memory" in (
        describe(ev.Proved(failed)).line or ""
    )
