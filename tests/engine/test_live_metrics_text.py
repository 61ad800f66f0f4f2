"""homelab.engine.llamacpp.metrics on Prometheus text: parsing and counter windows (pure).

The real server's /metrics is parsed in test_live_status.py; these cover the format's
corners (labels, timestamps, NaN/Inf, non-metrics pages) and counter resets.
"""

from __future__ import annotations

import json
import math

import pytest

from homelab.engine.llamacpp.metrics import (
    LlamaMetrics,
    MetricsFormatError,
    parse_prometheus_text,
    window,
)


def test_prometheus_text_parsing() -> None:
    text = (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed\n"
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        "llamacpp:prompt_tokens_total 42\n"
        "\n"
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3 1700000000000\n'
        "llamacpp:prompt_tokens_seconds NaN\n"
        "llamacpp:n_tokens_max +Inf\n"
        "llamacpp:requests_deferred 1.5e1\n"
    )
    samples = parse_prometheus_text(text)
    assert samples["llamacpp:prompt_tokens_total"] == 42
    assert samples['llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] == 3
    assert (
        math.isnan(samples["llamacpp:prompt_tokens_seconds"])
        and samples["llamacpp:n_tokens_max"] == math.inf
    )
    metrics = LlamaMetrics.from_samples(samples)
    assert metrics.requests_deferred == 15 and metrics.tokens_predicted_total is None
    with pytest.raises(MetricsFormatError, match="line 1"):
        parse_prometheus_text("<html>Not Found</html>")
    with pytest.raises(MetricsFormatError, match="no number"):
        parse_prometheus_text("llamacpp:prompt_tokens_total twelve")


def test_window_across_a_restart_is_unknown() -> None:
    before = LlamaMetrics(
        prompt_tokens_total=500, prompt_seconds_total=5.0, prompt_tokens_cached_total=10
    )
    after = LlamaMetrics(
        prompt_tokens_total=20, prompt_seconds_total=0.5, prompt_tokens_cached_total=0
    )
    restarted = window(before, after)
    assert (
        restarted.prompt_tokens is None
        and restarted.prompt_tps is None
        and restarted.cache_reuse is None
    )
    grown = window(
        after,
        LlamaMetrics(
            prompt_tokens_total=120, prompt_seconds_total=1.5, prompt_tokens_cached_total=30
        ),
    )
    assert grown.prompt_tps == 100.0 and grown.cache_reuse == (30, 100)
    assert json.dumps([grown.prompt_tokens, grown.cached_tokens])  # plain numbers
