"""Agents behind a set of models: which model of the set's record does which job (Claude
Code's main and small-fast models, Continue's chat and autocomplete models), and the
record itself as ``serve A B C`` writes it and an older serve wrote it."""

from __future__ import annotations

import json

import pytest

from homelab.agents import claude, continue_dev
from homelab.agents.set_target import set_roles
from homelab.agents.target import target_for
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.set_record import (
    SetMember,
    SetRecord,
    read_set,
    set_record_path,
)
from homelab.errors import EngineError

MIB = 1 << 20


def _facts(ctx: int, slots: int = 1) -> PlanFacts:
    return PlanFacts(slots, ctx * slots, ctx, ctx * slots, False, "f16", "f16")


def _member(ident: str, workload: str, mib: int, *aliases: str, ctx: int = 4096) -> SetMember:
    return SetMember(
        ident, aliases, workload, {"CUDA0": mib * MIB}, _facts(ctx), f"/m/{ident}.gguf"
    )


def _record(*members: SetMember) -> SetRecord:
    return SetRecord(1, "http://127.0.0.1:8080", members, gate_max_tokens=4096)


def test_the_agent_model_is_main_and_the_smallest_chat_or_fim_model_is_small() -> None:
    roles = set_roles(
        _record(
            _member("big-chat", "chat", 9000),
            _member("coder", "agent", 12000),
            _member("tiny-fim", "fim", 900),
            _member("mid-chat", "chat", 3000),
        )
    )
    assert (roles.main.id, roles.small.id) == ("coder", "tiny-fim")
    assert roles.fim is not None and roles.fim.id == "tiny-fim"


def test_a_model_whose_aliases_name_claude_haiku_is_the_small_one() -> None:
    roles = set_roles(
        _record(
            _member("coder", "agent", 12000),
            _member("tiny-fim", "fim", 900),
            _member("helper", "chat", 3000, "claude-haiku-*"),
        )
    )
    assert roles.small.id == "helper"


def test_a_set_without_agent_or_small_model_falls_back_to_its_first_planned() -> None:
    unplanned = SetMember("broken", (), "agent")  # no plan: it never loads
    roles = set_roles(_record(unplanned, _member("only", "chat", 500)))
    assert (roles.main.id, roles.small.id, roles.fim) == ("only", "only", None)
    with pytest.raises(EngineError, match="could be planned"):
        set_roles(_record(unplanned))


def test_claude_is_told_the_small_model_for_its_haiku_tier_only_behind_a_set() -> None:
    target = target_for(_facts(4096), base_url="http://127.0.0.1:8080", model="coder", gated=True)
    alone = claude.setup(target).env
    assert alone["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "coder"
    assert "ANTHROPIC_SMALL_FAST_MODEL" not in alone  # one engine: unchanged
    from dataclasses import replace

    env = claude.setup(replace(target, small_model="tiny-fim")).env
    assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_DEFAULT_SONNET_MODEL"] == "coder"
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == env["ANTHROPIC_SMALL_FAST_MODEL"] == "tiny-fim"


def test_continue_gets_the_fim_model_for_autocomplete_and_the_agent_model_for_chat() -> None:
    from dataclasses import replace

    target = target_for(_facts(4096), base_url="http://127.0.0.1:8080", model="coder", gated=True)
    alone = continue_dev.config_yaml(target)
    assert "autocomplete" not in alone
    text = continue_dev.config_yaml(replace(target, fim_model="tiny-fim", fim_context_tokens=2048))
    import yaml

    models = yaml.safe_load(text)["models"]
    assert [(m["model"], m["roles"]) for m in models] == [
        ("coder", ["chat", "edit", "apply"]),
        ("tiny-fim", ["autocomplete"]),
    ]
    assert models[1]["apiBase"] == "http://127.0.0.1:8080/v1"
    assert models[1]["defaultCompletionOptions"]["contextLength"] == 2048


def test_the_set_record_round_trips_and_an_older_one_still_reads(tmp_path) -> None:
    import os

    record = SetRecord(
        os.getpid(),
        "http://127.0.0.1:8080",
        (_member("coder", "agent", 12000, "gpt-*"), SetMember("x")),
        ("coder",),
        8192,
        5.0,
    )
    assert SetRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    older = {"pid": os.getpid(), "gate_url": "http://127.0.0.1:8080", "models": ["a", "b"]}
    set_record_path().parent.mkdir(parents=True, exist_ok=True)
    set_record_path().write_text(json.dumps(older))
    read = read_set()
    assert read is not None and read.ids == ("a", "b") and read.members[0].facts is None
    set_record_path().write_text(json.dumps({**older, "members": [{"id": 3}, "c"]}))
    read = read_set()
    assert read is not None and read.ids == ("c",)
