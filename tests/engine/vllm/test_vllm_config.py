"""Reading real models' config.json and weight sizes: local folders and the HF cache, offline."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from vllm_fixture_data import (
    CONFIGS,
    fake_hf_cache,
    raw_config,
    text_config,
    weights_total,
    write_shards,
)

from homelab.errors import ModelFileError, UnknownArchitectureError, UsageError
from homelab.plan.vllm.config import DTYPE_BYTES, load_model_config

KIND = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}


def test_dense_qwen3_8b_reads_geometry_and_weight_sizes(model_dir) -> None:
    raw = raw_config("Qwen__Qwen3-8B")
    model = load_model_config(str(model_dir("Qwen__Qwen3-8B")))
    assert model.layer_kinds == ("full",) * raw["num_hidden_layers"]
    assert (model.num_attention_heads, model.num_kv_heads, model.head_dim) == (
        raw["num_attention_heads"],
        raw["num_key_value_heads"],
        raw["head_dim"],
    )
    assert (
        model.dtype == raw["torch_dtype"] and model.dtype_bytes == DTYPE_BYTES[raw["torch_dtype"]]
    )
    assert model.max_model_len == raw["max_position_embeddings"]
    assert model.weights.total == weights_total("Qwen__Qwen3-8B")
    assert model.weights.source == "safetensors" and len(model.weights.files) == 5
    assert model.mla is None and model.linear is None and model.moe is None and not model.is_hybrid


def test_hybrid_qwen35_is_read_from_text_config(model_dir) -> None:
    text = text_config("Qwen__Qwen3.5-0.8B")
    model = load_model_config(str(model_dir("Qwen__Qwen3.5-0.8B")))
    assert model.model_type == "qwen3_5"
    assert model.layer_kinds == tuple(KIND[t] for t in text["layer_types"])
    assert model.is_hybrid and model.count("full") == text["layer_types"].count("full_attention")
    lin = model.linear
    assert lin is not None
    conv_channels = text["linear_key_head_dim"] * text["linear_num_key_heads"] * 2 + (
        text["linear_value_head_dim"] * text["linear_num_value_heads"]
    )
    assert lin.conv_elements == conv_channels * (text["linear_conv_kernel_dim"] - 1)
    assert lin.temporal_elements == (
        text["linear_num_value_heads"] * text["linear_value_head_dim"] * text["linear_key_head_dim"]
    )
    assert lin.ssm_dtype_bytes == DTYPE_BYTES[text["mamba_ssm_dtype"]] == 4
    assert lin.conv_dtype_bytes == DTYPE_BYTES[text["dtype"]]
    assert model.max_model_len == text["max_position_embeddings"]
    assert model.vocab_size == text["vocab_size"]


def test_full_attention_interval_alone_gives_the_same_layers(model_dir) -> None:
    raw = copy.deepcopy(raw_config("Qwen__Qwen3.5-0.8B"))
    expected = tuple(KIND[t] for t in raw["text_config"].pop("layer_types"))
    model = load_model_config(str(model_dir("Qwen__Qwen3.5-0.8B", raw)))
    assert model.layer_kinds == expected


def test_gemma3_leaves_geometry_to_transformers_defaults(model_dir) -> None:
    text = text_config("google__gemma-3-12b-it")
    assert "head_dim" not in text and "sliding_window_pattern" not in text  # the case under test
    model = load_model_config(str(model_dir("google__gemma-3-12b-it")))
    pattern = 6  # transformers' Gemma3TextConfig default
    n = text["num_hidden_layers"]
    assert model.layer_kinds == tuple(
        "full" if (i + 1) % pattern == 0 else "sliding" for i in range(n)
    )
    assert model.head_dim == 256 and model.num_kv_heads == text["num_key_value_heads"]
    assert model.sliding_window == text["sliding_window"]
    assert model.max_model_len == 131_072
    assert model.dtype == raw_config("google__gemma-3-12b-it")["torch_dtype"]


def test_gpt_oss_alternates_sliding_and_full_and_has_no_dtype(model_dir) -> None:
    raw = raw_config("openai__gpt-oss-20b")
    model = load_model_config(str(model_dir("openai__gpt-oss-20b")))
    assert model.layer_kinds == tuple(KIND[t] for t in raw["layer_types"])
    assert model.sliding_window == raw["sliding_window"]
    assert model.dtype is None and model.dtype_bytes == 2
    assert any("no dtype" in note for note in model.notes)
    assert model.moe is not None and model.moe.num_experts == raw["num_local_experts"]
    assert model.moe.experts_per_token == raw["num_experts_per_tok"]


def test_deepseek_v2_lite_is_mla(model_dir) -> None:
    raw = raw_config("deepseek-ai__DeepSeek-V2-Lite")
    model = load_model_config(str(model_dir("deepseek-ai__DeepSeek-V2-Lite")))
    assert model.mla is not None
    assert model.mla.width == raw["kv_lora_rank"] + raw["qk_rope_head_dim"]
    assert model.layer_kinds == ("full",) * raw["num_hidden_layers"]
    assert model.moe is not None and model.moe.expert_intermediate == raw["moe_intermediate_size"]
    assert model.moe.shared_intermediate == raw["n_shared_experts"] * raw["moe_intermediate_size"]


def test_mistral_small_has_no_sliding_window(model_dir) -> None:
    raw = raw_config("mistralai__Mistral-Small-24B-Instruct-2501")
    model = load_model_config(str(model_dir("mistralai__Mistral-Small-24B-Instruct-2501")))
    assert raw["sliding_window"] is None
    assert (
        model.layer_kinds == ("full",) * raw["num_hidden_layers"] and model.sliding_window is None
    )


def test_subfolder_weights_are_not_counted(model_dir) -> None:
    folder = model_dir("openai__gpt-oss-20b")
    (folder / "original").mkdir()
    write_shards(folder / "original", 10**9, 1)
    assert load_model_config(str(folder)).weights.total == weights_total("openai__gpt-oss-20b")


def test_repo_id_is_found_in_the_hf_cache_offline(tmp_path: Path) -> None:
    snapshot = fake_hf_cache(tmp_path / "hub", "Qwen/Qwen3-8B", "Qwen__Qwen3-8B")
    model = load_model_config("Qwen/Qwen3-8B", cache_dir=tmp_path / "hub")
    assert model.repo_id == "Qwen/Qwen3-8B" and model.directory == snapshot
    assert model.name == "Qwen/Qwen3-8B"
    assert model.weights.total == weights_total("Qwen__Qwen3-8B")


def test_dangling_shard_link_is_a_clear_error(tmp_path: Path) -> None:
    snapshot = fake_hf_cache(tmp_path / "hub", "Qwen/Qwen3-8B", "Qwen__Qwen3-8B")
    os.unlink(snapshot.parent.parent / "blobs" / "model-00002-of-00002.safetensors")
    with pytest.raises(ModelFileError, match="cannot be read") as info:
        load_model_config("Qwen/Qwen3-8B", cache_dir=tmp_path / "hub")
    assert info.value.hint and "download" in info.value.hint


def test_repo_not_in_cache_is_not_downloaded(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not in the Hugging Face cache") as info:
        load_model_config("Qwen/Qwen3-8B", cache_dir=tmp_path / "empty")
    assert "hf download Qwen/Qwen3-8B" in (info.value.hint or "")


def test_neither_folder_nor_repo_id_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        load_model_config("not a/valid/repo id", cache_dir=tmp_path)
    file = tmp_path / "model.gguf"
    file.write_bytes(b"GGUF")
    with pytest.raises(UsageError, match="is a file"):
        load_model_config(str(file))


def test_weights_from_the_index_when_shards_are_missing(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_bytes((CONFIGS / "Qwen__Qwen3-8B" / "config.json").read_bytes())
    total = weights_total("Qwen__Qwen3-8B")
    index = {"metadata": {"total_size": total}, "weight_map": {}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    model = load_model_config(str(folder))
    assert model.weights.total == total and model.weights.source == "index"
    assert any("not downloaded" in note for note in model.notes)


def test_no_weights_at_all_is_a_model_file_error(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_bytes((CONFIGS / "Qwen__Qwen3-8B" / "config.json").read_bytes())
    with pytest.raises(ModelFileError, match="no weight files"):
        load_model_config(str(folder))


def test_broken_or_missing_config_is_a_model_file_error(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    write_shards(folder, 1000, 1)
    with pytest.raises(ModelFileError, match="no config.json"):
        load_model_config(str(folder))
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="not valid JSON"):
        load_model_config(str(folder))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ModelFileError, match="num_attention_heads"):
        load_model_config(str(folder))


def test_recurrent_layers_homelab_cannot_price_are_refused(model_dir) -> None:
    raw = copy.deepcopy(raw_config("Qwen__Qwen3.5-0.8B"))
    raw["text_config"]["layer_types"][0] = "mamba"
    with pytest.raises(UnknownArchitectureError, match="'mamba'"):
        load_model_config(str(model_dir("Qwen__Qwen3.5-0.8B", raw)))


def test_layer_types_that_do_not_match_the_layer_count_are_refused(model_dir) -> None:
    raw = copy.deepcopy(raw_config("openai__gpt-oss-20b"))
    raw["layer_types"] = raw["layer_types"][:-1]
    with pytest.raises(ModelFileError, match="layer_types"):
        load_model_config(str(model_dir("openai__gpt-oss-20b", raw)))


def test_allowed_length_follows_vllms_rope_rules(model_dir) -> None:
    oss = raw_config("openai__gpt-oss-20b")["rope_scaling"]  # yarn: original length x factor
    assert load_model_config(str(model_dir("openai__gpt-oss-20b"))).max_model_len == int(
        oss["original_max_position_embeddings"] * oss["factor"]
    )
    ds = raw_config("deepseek-ai__DeepSeek-V2-Lite")["rope_scaling"]
    assert load_model_config(str(model_dir("deepseek-ai__DeepSeek-V2-Lite"))).max_model_len == int(
        ds["original_max_position_embeddings"] * ds["factor"]
    )
    # Gemma 3 has a linear factor of 8 that vLLM does not apply (its length is already stretched)
    assert text_config("google__gemma-3-12b-it")["rope_scaling"]["factor"] == 8.0
    assert load_model_config(str(model_dir("google__gemma-3-12b-it"))).max_model_len == 131_072
    raw = copy.deepcopy(raw_config("Qwen__Qwen3-8B"))
    raw["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    assert (
        load_model_config(str(model_dir("Qwen__Qwen3-8B", raw))).max_model_len
        == 2 * raw["max_position_embeddings"]
    )
    raw["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}  # already in the length key
    assert (
        load_model_config(str(model_dir("Qwen__Qwen3-8B", raw))).max_model_len
        == raw["max_position_embeddings"]
    )
