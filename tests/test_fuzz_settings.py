"""Every hypothesis test in the suite is derandomized and has no deadline.

A random seed makes a failure a one-off nobody can reproduce; a deadline makes a busy CI
machine's clock fail a correct test (speed is measured in bench/). This finds the
``@given`` tests by importing every test module that uses hypothesis.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _given_tests() -> list[tuple[str, object]]:
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if path == Path(__file__).resolve() or "@given" not in path.read_text(encoding="utf-8"):
            continue
        sys.path.insert(0, str(path.parent))  # the tests' own sibling imports (gguf_bytes)
        try:
            name = "fuzz_settings_" + "_".join(path.relative_to(TESTS).with_suffix("").parts)
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent))
        for attr, value in inspect.getmembers(module, inspect.isfunction):
            if getattr(value, "is_hypothesis_test", False):
                found.append((f"{path.relative_to(TESTS)}::{attr}", value))
    return found


GIVEN = _given_tests()


def test_the_suite_has_hypothesis_tests() -> None:
    assert len(GIVEN) >= 4  # the reader fuzz and the whole-plan fuzz at least


@pytest.mark.parametrize(("name", "test"), GIVEN, ids=[name for name, _ in GIVEN])
def test_hypothesis_tests_are_derandomized_without_deadline(name: str, test: object) -> None:
    chosen = test._hypothesis_internal_use_settings  # type: ignore[attr-defined]
    assert chosen.derandomize, f"{name}: set derandomize=True"
    assert chosen.deadline is None, f"{name}: set deadline=None"
