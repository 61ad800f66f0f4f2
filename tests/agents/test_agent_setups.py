"""Each agent's own format, read back the way the agent reads it, carries the per-request
context of a real plan: the per-slot share (split slots) or the gate's ceiling (unified)."""

from __future__ import annotations

import json
import math
import os
import shlex
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from homelab.agents import aider, claude, codex, continue_dev, opencode
from homelab.agents.catalog import AGENTS, prepare
from homelab.agents.launch import write_files
from homelab.agents.setup import AgentSetup, shell_lines
from homelab.agents.target import AgentTarget, RequestContext, target_for
from tests.agents.conftest import gate_ceiling, plan_facts, split_target, unified_target

PLANS = ["smol_split", "llama_split", "smol_unified", "llama_unified"]


def target_of(request: pytest.FixtureRequest, plan: str, api_key: str | None = None):
    facts = request.getfixturevalue(plan)
    build = unified_target if facts.unified else split_target
    expected = gate_ceiling(facts) if facts.unified else facts.ctx_per_slot
    return build(facts, api_key=api_key), expected


def read_back(setup: AgentSetup, state: Path) -> dict[str, object]:
    """Context, output cap and URL as the agent would read them from its setup."""
    target = setup.target
    if setup.agent == "claude":
        env = setup.env
        return {
            "context": int(env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"]),
            "output": int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]),
            "url": env["ANTHROPIC_BASE_URL"],
            "model": env["ANTHROPIC_MODEL"],
        }
    if setup.agent == "opencode":
        config = json.loads(setup.env["OPENCODE_CONFIG_CONTENT"])
        provider_id, model = config["model"].split("/", 1)
        provider = config["provider"][provider_id]
        assert provider["npm"] == "@ai-sdk/openai-compatible"
        assert config["small_model"] == config["model"]
        limit = provider["models"][model]["limit"]
        return {
            "context": limit["context"],
            "output": limit["output"],
            "url": provider["options"]["baseURL"],
            "model": model,
        }
    if setup.agent == "codex":
        args = list(setup.args)
        assert args[0::2] == ["-c"] * (len(args) // 2)
        config: dict[str, object] = {}
        for pair in args[1::2]:  # each value must be TOML, as Codex parses it
            key, _, value = pair.partition("=")
            config[key] = tomllib.loads(f"v = {value}")["v"]
        provider = f"model_providers.{config['model_provider']}"
        assert config[f"{provider}.wire_api"] == "responses"
        assert (
            0
            < config["model_auto_compact_token_limit"]
            <= (config["model_context_window"] - target.max_output_tokens)
        )
        return {
            "context": config["model_context_window"],
            "output": target.max_output_tokens,
            "url": config[f"{provider}.base_url"],
            "model": config["model"],
        }
    if setup.agent == "aider":
        argv = setup.argv(state)
        path = Path(argv[argv.index("--model-metadata-file") + 1])
        name = argv[argv.index("--model") + 1]
        entry = json.loads(path.read_text())[name]
        assert entry["litellm_provider"] == "openai" and name.startswith("openai/")
        return {
            "context": entry["max_input_tokens"] + entry["max_output_tokens"],
            "output": entry["max_output_tokens"],
            "url": argv[argv.index("--openai-api-base") + 1],
            "model": name.removeprefix("openai/"),
        }
    assert setup.agent == "continue"
    block = yaml.safe_load(setup.config_block or "")
    assert block["schema"] == "v1" and len(block["models"]) == 1
    model = block["models"][0]
    assert model["provider"] == "openai"
    argv = setup.argv(state)
    assert yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text()) == block
    options = model["defaultCompletionOptions"]
    return {
        "context": options["contextLength"],
        "output": options["maxTokens"],
        "url": model["apiBase"],
        "model": model["model"],
    }


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("agent", list(AGENTS))
def test_each_agent_gets_the_context_one_request_really_has(
    request: pytest.FixtureRequest, plan: str, agent: str, tmp_path: Path
) -> None:
    target, expected = target_of(request, plan)
    facts = request.getfixturevalue(plan)
    setup = prepare(agent, target)
    write_files(setup, tmp_path)
    seen = read_back(setup, tmp_path)
    assert seen["context"] == expected == target.context_tokens
    assert seen["context"] < facts.ctx_total  # never the whole -c
    told = continue_dev.max_tokens(target) if agent == "continue" else target.max_output_tokens
    assert seen["output"] == told
    assert seen["model"] == "model.gguf"
    openai_style = agent != "claude"
    assert seen["url"] == ("http://127.0.0.1:8080/v1" if openai_style else "http://127.0.0.1:8080")


def test_the_gates_key_reaches_every_agent_and_a_placeholder_stands_in_without_one(
    smol_split, tmp_path: Path
) -> None:
    key = "k-3f9c"
    keyed = {name: prepare(name, split_target(smol_split, api_key=key)) for name in AGENTS}
    bare = {name: prepare(name, split_target(smol_split)) for name in AGENTS}
    assert keyed["claude"].env["ANTHROPIC_AUTH_TOKEN"] == key
    assert bare["claude"].env["ANTHROPIC_AUTH_TOKEN"] == claude.PLACEHOLDER_TOKEN
    assert keyed["claude"].unset[0] == "ANTHROPIC_API_KEY"

    def options(setup: AgentSetup) -> dict[str, str]:
        config = json.loads(setup.env["OPENCODE_CONFIG_CONTENT"])
        return config["provider"][opencode.PROVIDER_ID]["options"]

    assert options(keyed["opencode"])["apiKey"] == key and "apiKey" not in options(bare["opencode"])
    assert keyed["codex"].env == {codex.KEY_VARIABLE: key} and bare["codex"].env == {}
    assert f'model_providers.homelab.env_key="{codex.KEY_VARIABLE}"' in keyed["codex"].args
    assert not any("env_key" in a for a in bare["codex"].args)
    assert keyed["aider"].env["OPENAI_API_KEY"] == key
    assert bare["aider"].env["OPENAI_API_KEY"] == aider.PLACEHOLDER_KEY
    assert yaml.safe_load(keyed["continue"].config_block)["models"][0]["apiKey"] == key
    written = write_files(keyed["continue"], tmp_path)
    assert stat.S_IMODE(os.stat(written[0]).st_mode) == 0o600  # it holds the key


def continue_input_room(context: int, max_tokens: int) -> int:
    """cn 1.5.47's room for the prompt (its bundle's context check); it refuses to run at
    all ("max_tokens is larger than context_length") when this is not positive."""
    reserve = min(max(max_tokens, math.ceil(0.2 * (context - max_tokens))), 15_000)
    return context - max_tokens - reserve


@pytest.mark.parametrize("window", [1_024, 8_192, 32_768, 131_072])
def test_continue_is_told_an_answer_bound_it_accepts(window: int) -> None:
    target = AgentTarget("http://127.0.0.1:8080", "m", RequestContext(window, "t"), window // 2)
    if window // 2 <= 15_000:  # half the window, while under its 15k cap: cn refuses to run
        assert continue_input_room(window, target.max_output_tokens) <= 0
    told = yaml.safe_load(continue_dev.config_yaml(target))["models"][0]
    bound = told["defaultCompletionOptions"]["maxTokens"]
    assert continue_input_room(window, bound) >= window // 2 - 1


def test_claude_codes_compaction_point_matches_the_published_rule() -> None:
    # window − min(max_output, 20000) − 13000 (tui-gate.md §C: 32k → 11,576 / 15,672 ...)
    assert claude.compaction_point(32768, 8192) == 11_576
    assert claude.compaction_point(32768, 4096) == 15_672
    assert claude.compaction_point(65536, 8192) == 44_344
    assert claude.compaction_point(131072, 4096) == 113_976
    assert claude.compaction_point(200_000, 64_000) == 167_000  # output reserve capped at 20k


def test_claude_code_is_warned_below_its_100k_minimum(
    smol_split, smol_unified, llama_split, llama8b_gguf
) -> None:
    tiny = prepare("claude", split_target(smol_split))  # 1,024 per slot
    assert len(tiny.warnings) == 1 and "cannot work in 1,024 tokens" in tiny.warnings[0]
    small_facts = plan_facts(llama8b_gguf, vram=24 << 30, ctx=65536, slots=2)
    small = prepare("claude", split_target(small_facts))
    assert small_facts.ctx_per_slot == 32768  # compacts at 11,576: under its 12.4k own prompt
    assert "cannot work in 32,768 tokens" in small.warnings[0] and "11,576" in small.warnings[0]
    assert "`slots`" in small.warnings[0]
    mid = prepare("claude", split_target(llama_split))  # 65,536 per slot
    assert llama_split.ctx_per_slot == 65536 and len(mid.warnings) == 1
    assert "needs 100,000 tokens per request and gets 65,536" in mid.warnings[0]
    assert "compacts at 44,344" in mid.warnings[0]
    roomy_facts = plan_facts(llama8b_gguf, vram=24 << 30, ctx=131072, slots=1)
    assert prepare("claude", split_target(roomy_facts)).warnings == ()
    # on a unified pool only a larger pool helps: fewer slots would not
    pooled = prepare("claude", unified_target(smol_unified))
    assert "`ctx`" in pooled.warnings[0] and "`slots`" not in pooled.warnings[0]
    # the rule is Claude Code's: the other agents get no such warning
    assert prepare("opencode", split_target(smol_split)).warnings == ()


def test_a_unified_pool_without_a_gate_warns_every_agent(smol_unified) -> None:
    target = target_for(smol_unified, base_url="http://127.0.0.1:8080", model="m", gated=False)
    for name in AGENTS:
        warnings = prepare(name, target).warnings
        assert any("no gate in front of a unified KV pool" in w for w in warnings), name
    vllm = target_for(
        smol_unified, base_url="http://127.0.0.1:8000", model="m", gated=False, engine="vllm"
    )
    assert prepare("opencode", vllm).warnings == ()  # vLLM schedules its own pool


def test_printed_lines_set_exactly_the_agents_environment_in_a_real_shell(
    smol_split, tmp_path: Path
) -> None:
    """``eval "$(homelab agent opencode --print)"``: the JSON survives shell quoting."""
    target: AgentTarget = split_target(smol_split, api_key="it's a 'key' $HOME `x`")
    for name in ("claude", "opencode"):
        setup = prepare(name, target)
        script = "\n".join(shell_lines(setup, tmp_path))
        names = " ".join(setup.env)
        shown = subprocess.run(
            ["bash", "-c", f'{script}\nfor n in {names}; do printf "%s\\0" "${{!n}}"; done'],
            capture_output=True,
            text=True,
            env={"PATH": os.environ["PATH"], "ANTHROPIC_API_KEY": "mine"},
            check=True,
        )
        values = shown.stdout.split("\0")[:-1]
        assert dict(zip(setup.env, values, strict=True)) == setup.env


def test_argument_agents_print_a_command_line_that_splits_back(smol_split, tmp_path) -> None:
    for name in ("codex", "aider", "continue"):
        setup = prepare(name, split_target(smol_split))
        line = shell_lines(setup, tmp_path)[-1]
        assert shlex.split(line) == setup.argv(tmp_path)
        assert "{state}" not in line


def test_continue_block_is_one_model_with_the_schema_fields(smol_unified) -> None:
    text = continue_dev.config_yaml(unified_target(smol_unified))
    block = yaml.safe_load(text)
    assert set(block) == {"name", "version", "schema", "models"}
    model = block["models"][0]
    assert set(model) >= {"name", "provider", "model", "apiBase", "defaultCompletionOptions"}
    assert set(model["roles"]) <= {"chat", "autocomplete", "embed", "rerank", "edit", "apply"}
