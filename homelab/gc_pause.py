"""Hold the cyclic garbage collector still while a parse or a plan makes thousands of objects.

A 40,000-tensor header becomes ~120,000 small objects (names, shapes, tensor infos) and a
plan makes as many again (tensor slots). None of them forms a cycle, but each 700 new
objects start a collection that walks the young ones, and the older generations are
walked again and again as the table grows: about a tenth of the time the parse takes.
Pausing the collector for the length of the loop changes nothing else (reference counting
still frees what is dropped) and it is turned back on only if it was on before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the ``with`` block (restored as it was)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
