"""Cache affinity and prompt-cache reuse: keep each conversation on the engine slot that
holds its prefix, and notice a turn that re-processed most of its prompt.

llama-server picks a slot by prompt similarity, else the least recently used one, so two
agents alternating on few slots evict each other's cache. The gate pins every admitted
request to a slot (``id_slot``): a known conversation goes back to its slot when that slot
is free, a new one to the free slot least wanted by other conversations. The gate knows
which slots are busy because every request it admits is pinned; no engine call is needed.

Reuse is read from each response (``timings.cache_n`` / ``prompt_n``, or the Anthropic
``usage``): :class:`ReuseBook` keeps the hit rate and the re-prefill alarms. No I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from homelab.engine.llamacpp.reuse_alarm import SHARE
from homelab.gate.state import ReprefillAlarm

REMEMBERED = 1024
"""Conversations whose slot the gate remembers (least recently seen forgotten first)."""
ALARM_MIN_PROMPT = 256
"""A turn shorter than this never alarms (re-processing it costs little)."""
ALARMS_KEPT = 20


class SlotBook:
    """Which slot each conversation used, and which slots the gate's requests hold."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.busy: set[int] = set()
        self._owner: OrderedDict[str, int] = OrderedDict()
        self._used_at: dict[int, int] = {}
        self._tick = 0

    def slot_of(self, conversation: str | None) -> int | None:
        return None if conversation is None else self._owner.get(conversation)

    def take(self, conversation: str | None) -> int | None:
        """A free slot for this request, marked busy; None when none is free."""
        free = [s for s in range(self.slots) if s not in self.busy]
        if not free:
            return None
        mine = self.slot_of(conversation)
        if mine is not None and mine in free:
            slot = mine
        else:
            owned = set(self._owner.values())
            slot = min(free, key=lambda s: (s in owned, self._used_at.get(s, -1)))
        self.busy.add(slot)
        self._tick += 1
        self._used_at[slot] = self._tick
        if conversation is not None:
            self._owner[conversation] = slot
            self._owner.move_to_end(conversation)
            while len(self._owner) > REMEMBERED:
                self._owner.popitem(last=False)
        return slot

    def resize(self, slots: int) -> None:
        """The engine restarted with ``slots`` slots: conversations on slots that are gone
        are forgotten (busy ones are given back as their requests end)."""
        self.slots = slots
        for conversation, slot in list(self._owner.items()):
            if slot >= slots:
                del self._owner[conversation]

    def give(self, slot: int | None) -> None:
        if slot is not None:
            self.busy.discard(slot)


class ReuseBook:
    """Prompt tokens reused vs processed, and alarms for known conversations."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.cached = 0
        self.prompt = 0
        self.alarms: deque[ReprefillAlarm] = deque(maxlen=ALARMS_KEPT)
        self._seen: OrderedDict[str, int] = OrderedDict()
        self.clock = clock

    @property
    def hit_rate(self) -> float | None:
        return None if self.prompt == 0 else self.cached / self.prompt

    def record(
        self, conversation: str | None, cached: int, processed: int, slot: int | None
    ) -> ReprefillAlarm | None:
        """One response's reuse; the alarm when a known conversation re-processed most of
        a prompt of at least :data:`ALARM_MIN_PROMPT` tokens."""
        total = cached + processed
        self.cached += cached
        self.prompt += total
        alarm = None
        if conversation is not None:
            if (
                conversation in self._seen
                and total >= ALARM_MIN_PROMPT
                and processed > SHARE * total
            ):
                alarm = ReprefillAlarm(self.clock(), conversation, total, cached, slot)
                self.alarms.append(alarm)
            self._seen[conversation] = total
            self._seen.move_to_end(conversation)
            while len(self._seen) > REMEMBERED:
                self._seen.popitem(last=False)
        return alarm
