"""Write ``homelab/gguf/ggml_table.py``: the ggml type table, taken from the ``gguf`` package.

Run after upgrading ``gguf`` (``tests/gguf/test_ggml_types.py`` fails until you do)::

    python tools/gen_ggml_table.py

homelab reads the committed table at run time, so it never imports ``gguf`` (which
imports numpy, ~100 ms of start-up); ``gguf`` is needed only here and in the tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "homelab" / "gguf" / "ggml_table.py"

_HEAD = '''\
"""ggml tensor types as the ``gguf`` package knows them: generated, do not edit.

Written by ``tools/gen_ggml_table.py`` from ``gguf.GGMLQuantizationType`` and
``gguf.GGML_QUANT_SIZES``; ``tests/gguf/test_ggml_types.py`` checks it against the
installed package. Each row is ``(type id, name, values per block, bytes per block)``.
"""

GGML_TYPE_ROWS: tuple[tuple[int, str, int, int], ...] = (
'''


def rows() -> list[tuple[int, str, int, int]]:
    """``(id, name, block size, type size)`` of every type with known sizes, by id."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    out = []
    for member in GGMLQuantizationType:
        sizes = GGML_QUANT_SIZES.get(member)
        if sizes is not None:
            out.append((int(member.value), member.name, int(sizes[0]), int(sizes[1])))
    return sorted(out)


def render() -> str:
    """The module's text for the installed ``gguf`` package."""
    lines = [_HEAD]
    lines += [f'    ({tid}, "{name}", {block}, {size}),\n' for tid, name, block, size in rows()]
    lines.append(")\n")
    return "".join(lines)


def main() -> int:
    text = render()
    if TABLE.exists() and TABLE.read_text() == text:
        print(f"{TABLE} is up to date")
        return 0
    TABLE.write_text(text)
    print(f"wrote {TABLE} ({len(rows())} types)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
