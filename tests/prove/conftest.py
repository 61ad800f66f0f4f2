"""Fixtures of the prove-and-heal tests: the supervisor tests' ``engines`` (nothing left running)."""

from tests.engine.conftest import engines  # noqa: F401  (a fixture, used by name)
