"""Fuzz the whole plan path, not only the reader: header bytes -> read_model -> geometry_of
-> plan_model on a replayed card -> the flags and the --json object.

Mutants start from the factory's real geometries (dense, sliding-window, hybrid
recurrent, MLA, MoE) and change metadata values (absurd, negative, zero, of the wrong
type, per-layer arrays of the wrong length, removed) and tensor infos (unknown types,
shapes, block numbers, dropped tensors). The mutants that crashed the probe got past
the reader, so each one is planned to the end. Every outcome must be a plan or a
``HomelabError`` whose exit code says what went wrong (usage 2, does not fit 3, bad model
4); no other exception, no negative bytes in a plan.

Derandomized (the same examples every run), no deadline, a bounded number of examples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.engine.options import plan_options
from homelab.errors import ExitCode, HomelabError
from homelab.gguf.header import GgufHeader, TensorInfo
from homelab.gguf.model_file import read_model
from homelab.plan.card import card_for
from homelab.plan.options import PlanOptions
from homelab.plan.pipeline import plan_model
from homelab.plan.serialize import plan_to_dict
from tests.gguf.reencode import VT, Typed, encode, factory_header

SEED_ARCHS = ("llama", "gemma3", "gpt-oss", "qwen35", "deepseek2", "granitehybrid", "lfm2")
SNAPSHOT = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "rtx3090_headless.json"
EXPECTED_CODES = {ExitCode.USAGE, ExitCode.DOES_NOT_FIT, ExitCode.BAD_MODEL}

INTERESTING_INTS = [0, 1, 2, 3, 7, 31, 32, 40, 64, 100, 128, 255, 256, 4096, 65_536]
INTERESTING_INTS += [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
EXTRA_KEYS = (
    "attention.key_length_swa",
    "attention.value_length_swa",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "attention.key_length_mla",
    "attention.value_length_mla",
    "attention.shared_kv_layers",
    "full_attention_interval",
    "nextn_predict_layers",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_feed_forward_length",
    "ssm.conv_kernel",
    "ssm.inner_size",
    "ssm.state_size",
    "ssm.group_count",
    "shortconv.l_cache",
    "vocab_size",
)
FUZZ = settings(
    max_examples=250,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GgufHeader]:
    folder = tmp_path_factory.mktemp("seeds")
    return {arch: factory_header(arch, folder) for arch in SEED_ARCHS}


@pytest.fixture(scope="module")
def card():  # type: ignore[no-untyped-def]
    return card_for(plan_options(gpu_snapshot=SNAPSHOT, sample_seconds=0))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mutants")


def _values(n_layer: int) -> st.SearchStrategy[Any]:
    ints = st.sampled_from(INTERESTING_INTS) | st.integers(0, 2**32 - 1)
    negatives = st.integers(-(2**31), -1).map(lambda v: Typed(VT.INT32, v))
    per_layer = st.lists(
        st.sampled_from(INTERESTING_INTS[:12]),
        min_size=max(n_layer - 1, 0),
        max_size=n_layer + 1,
    )
    plausible = st.integers(0, 512)
    return st.one_of(
        plausible,
        plausible,
        plausible,
        ints,
        negatives,
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=8),
        per_layer,
        st.lists(st.booleans(), max_size=n_layer + 2),
        st.lists(negatives, min_size=1, max_size=3),
        st.just(None),  # remove the key
    )


def _tensor(draw: st.DrawFn, tensor: TensorInfo, n_layer: int) -> TensorInfo | None:
    kind = draw(st.sampled_from(["type", "shape", "name", "drop"]))
    if kind == "drop":
        return None
    if kind == "type":
        return tensor._replace(ggml_type=draw(st.integers(0, 64)))
    if kind == "shape":
        shape = tuple(
            draw(st.lists(st.sampled_from(INTERESTING_INTS[:15]), min_size=1, max_size=4))
        )
        return tensor._replace(shape=shape)
    block = draw(st.sampled_from([0, n_layer - 1, n_layer, n_layer + 1, 10**6]))
    return tensor._replace(name=f"blk.{block}.attn_k.weight")


@st.composite
def mutant(draw: st.DrawFn, seeds: dict[str, GgufHeader]) -> tuple[str, bytes]:
    arch = draw(st.sampled_from(SEED_ARCHS))
    header = seeds[arch]
    metadata = dict(header.metadata)
    n_layer = metadata[f"{arch}.block_count"]
    own = sorted(k for k in metadata if k.startswith(f"{arch}."))
    keys = st.sampled_from(own) | st.sampled_from([f"{arch}.{k}" for k in EXTRA_KEYS])
    for _ in range(draw(st.integers(1, 4))):
        key = draw(keys | st.sampled_from(["general.architecture", "split.count"]))
        value = draw(_values(n_layer))
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
    tensors: list[TensorInfo] = list(header.tensors)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(tensors) - 1))
        changed = _tensor(draw, tensors[at], n_layer)
        names = {t.name for i, t in enumerate(tensors) if i != at}
        if changed is None:
            del tensors[at]
        elif changed.name not in names:  # a duplicate name is the reader's case, not ours
            tensors[at] = changed
    return arch, encode(metadata, tensors)


@st.composite
def options(draw: st.DrawFn) -> PlanOptions:
    cache = draw(st.sampled_from([None, "f16", "q8_0", "q4_0", "iq4_nl"]))
    ctx = draw(st.sampled_from([None, None, 4096, 65_536]))
    return plan_options(
        ctx=ctx,
        slots=draw(st.sampled_from([None, None, 1, 4])),
        cache_type_k=cache,
        cache_type_v=cache,
        unified=draw(st.booleans()),
        gpu_snapshot=SNAPSHOT,
        sample_seconds=0,
    )


def _plan_somehow(path: Path, card, opts: PlanOptions) -> str:  # type: ignore[no-untyped-def]
    """Plan ``path`` to the end: ``"plan"``, or the error's class name."""
    try:
        model = read_model(path)
        plan = plan_model(model, str(path), card, opts)
        argv = llama_server_argv(plan)
        data = json.loads(json.dumps(plan_to_dict(plan, argv)))
    except HomelabError as error:
        assert error.exit_code in EXPECTED_CODES, (type(error).__name__, error.message)
        assert error.message and "Traceback" not in error.message
        return type(error).__name__
    alloc = plan.candidate.allocation
    assert alloc.total >= 0 and alloc.bytes_per_token >= 0 and plan.tokens_fit >= 0
    assert plan.weights.total >= 0 and data["argv"] == argv
    # KV on the card, unless no layer that keeps KV is there (-ngl 1: the output layer only)
    assert alloc.bytes_per_token > 0 or not plan.geometry.kv_layers or plan.n_gpu_layers == 1
    return "plan"


def test_the_seeds_plan(seeds: dict[str, GgufHeader], card, folder: Path) -> None:  # type: ignore[no-untyped-def]
    """Unmutated, every seed plans (so the mutants fail for their mutation)."""
    for arch, header in seeds.items():
        path = folder / f"seed-{arch}.gguf"
        path.write_bytes(encode(header.metadata, header.tensors))
        outcome = _plan_somehow(path, card, plan_options(gpu_snapshot=SNAPSHOT, sample_seconds=0))
        assert outcome == "plan", arch


@FUZZ
@given(data=st.data())
def test_mutated_headers_plan_or_fail_cleanly(
    data: st.DataObject, seeds: dict[str, GgufHeader], card, folder: Path
) -> None:  # type: ignore[no-untyped-def]
    arch, raw = data.draw(mutant(seeds), label="mutant")
    opts = data.draw(options(), label="options")
    path = folder / "mutant.gguf"
    path.write_bytes(raw)
    event(_plan_somehow(path, card, opts))  # --hypothesis-show-statistics: how many plan
