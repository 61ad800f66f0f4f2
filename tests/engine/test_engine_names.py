"""Only the engine kind tells engines apart: no engine name is compared anywhere else.

Code that must behave differently per engine asks its :class:`~homelab.engine.kinds.EngineKind`
(a capability or a default); a ``== "vllm"`` elsewhere is a second place that knows.
"""

from __future__ import annotations

import ast
from pathlib import Path

import homelab
from homelab.engine.kinds import KINDS

ROOT = Path(homelab.__file__).parent
OWNERS = {
    ROOT / "engine" / "kinds.py",
    *(ROOT / "engine" / name / "kind.py" for name in ("llamacpp", "vllm")),
}


def _literals(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {text for element in node.elts for text in _literals(element)}
    return set()


def name_compares(source: str) -> list[int]:
    """The lines where ``source`` compares (``==``, ``!=``, ``in``, ``match``) an engine name."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_literals(operand) & KINDS.keys() for operand in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and _literals(node.value) & KINDS.keys():
            lines.append(node.lineno)
    return lines


def test_the_finder_sees_each_way_of_comparing_a_name() -> None:
    source = (
        'a = kind == "vllm"\n'
        'b = "llama.cpp" != kind\n'
        'c = kind in ("vllm", "other")\n'
        'match kind:\n    case "vllm":\n        pass\n'
        'd = kind == "llama-server"\n'
    )
    assert name_compares(source) == [1, 2, 3, 5]


def test_no_engine_name_is_compared_outside_the_engine_kind() -> None:
    assert all(owner.is_file() for owner in OWNERS)
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if path in OWNERS:
            continue
        if lines := name_compares(path.read_text(encoding="utf-8")):
            found[where] = lines
    assert found == {}, (
        "ask the engine kind (homelab/engine/kinds.py and each kind's kind.py) instead"
    )
