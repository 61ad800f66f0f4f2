"""``vllm serve``'s argv from a plan: every flag explicit, prefix caching always on."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_fixture_data import fake_hf_cache

from homelab.engine.vllm.argv import vllm_argv
from homelab.errors import UsageError
from homelab.gpu.report import synthetic_report
from homelab.plan.vllm.plan import vllm_plan
from homelab.units import GiB


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("Qwen__Qwen3-8B", "auto"),
        ("Qwen__Qwen3-8B", "fp8"),
        ("Qwen__Qwen3.5-0.8B", "auto"),  # hybrid: off by default in vLLM before 0.28
        ("openai__gpt-oss-20b", "auto"),
        ("deepseek-ai__DeepSeek-V2-Lite", "fp8"),
    ],
)
def test_argv_carries_every_planned_flag_and_prefix_caching(model_dir, name, dtype) -> None:
    plan = vllm_plan(model_dir(name), synthetic_report(96 * GiB), kv_cache_dtype=dtype)
    argv = vllm_argv(plan, host="127.0.0.1", port=18_001)
    assert argv[:3] == ["vllm", "serve", plan.model_ref]
    assert argv.count("--enable-prefix-caching") == 1
    assert "--no-enable-prefix-caching" not in argv
    assert int(_flag(argv, "--max-model-len")) == plan.max_model_len
    assert int(_flag(argv, "--max-num-seqs")) == plan.max_num_seqs
    assert float(_flag(argv, "--gpu-memory-utilization")) == plan.gpu_memory_utilization
    assert _flag(argv, "--kv-cache-dtype") == dtype
    assert int(_flag(argv, "--max-num-batched-tokens")) == plan.max_num_batched_tokens
    assert (_flag(argv, "--host"), _flag(argv, "--port")) == ("127.0.0.1", "18001")
    assert all(isinstance(a, str) for a in argv)


def test_argv_order_matches_the_documented_command(model_dir, wayland_3090) -> None:
    argv = vllm_argv(vllm_plan(model_dir("Qwen__Qwen3-8B"), wayland_3090))
    flags = [a for a in argv if a.startswith("--")]
    assert flags == [
        "--max-model-len",
        "--max-num-seqs",
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        "--max-num-batched-tokens",
        "--enable-prefix-caching",
        "--served-model-name",
        "--host",
        "--port",
    ]
    assert (_flag(argv, "--host"), _flag(argv, "--port")) == ("127.0.0.1", "8000")


def test_a_local_folder_is_served_under_its_own_name_not_its_path(model_dir) -> None:
    folder = model_dir("Qwen__Qwen3-8B")
    argv = vllm_argv(vllm_plan(folder, synthetic_report(96 * GiB)))
    assert _flag(argv, "--served-model-name") == "Qwen__Qwen3-8B" == Path(folder).name


def test_a_cached_repo_is_served_from_its_snapshot_under_its_repo_id(tmp_path) -> None:
    snapshot = fake_hf_cache(tmp_path / "hub", "Qwen/Qwen3-8B", "Qwen__Qwen3-8B")
    plan = vllm_plan("Qwen/Qwen3-8B", synthetic_report(48 * GiB), hf_cache_dir=tmp_path / "hub")
    argv = vllm_argv(plan, executable="/opt/vllm/bin/vllm")
    assert argv[:3] == ["/opt/vllm/bin/vllm", "serve", str(snapshot)]
    assert _flag(argv, "--served-model-name") == "Qwen3-8B"  # the clean id llama.cpp serves too
    named = vllm_argv(plan, executable="/opt/vllm/bin/vllm", served="my qwen/8b,fast")
    assert _flag(named, "--served-model-name") == "8b-fast"  # a preset's key, cleaned
    blank = vllm_argv(plan, executable="/opt/vllm/bin/vllm", served="/ ./..")
    assert _flag(blank, "--served-model-name") == "Qwen3-8B"  # nothing usable: the repo's


@pytest.mark.parametrize(
    ("host", "port"), [("127.0.0.1", 0), ("127.0.0.1", 70_000), ("", 8000), ("127.0.0.1", True)]
)
def test_bad_host_or_port_is_a_usage_error(model_dir, host, port) -> None:
    plan = vllm_plan(model_dir("Qwen__Qwen3-8B"), synthetic_report(48 * GiB))
    with pytest.raises(UsageError):
        vllm_argv(plan, host=host, port=port)
