"""The traffic ``homelab bench`` sends: independent prompts and agent sessions (pure).

- **chat** (independent prompts): every request is a fresh prompt of about N tokens that
  shares nothing with any other, not even its first word, so the engine's prompt cache
  cannot help (llama.cpp reuses a common token *prefix*; SmolLM2-style tokenizers add no
  BOS, so the first token already differs).
- **agent** (sessions): one system prompt shared by every session (an agent's
  instructions and tool schemas), then each turn is the whole history so far (system,
  the earlier parts and the model's replies) plus a new part: the prefix a warm cache
  reuses, so the reuse per turn shows.

Text is made of common words from a seeded generator (the same seed, the same text);
the exact token count is taken by the engine (:mod:`homelab.measure.stream` trims a
text to N tokens with its ``/tokenize``), so this module only has to make enough words.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum

WORDS = tuple(
    """
    apple river stone garden window table music paper light water cloud forest bread
    summer winter autumn spring morning evening candle mirror bridge castle island ocean
    valley mountain desert meadow harbor village market street lantern pencil basket
    blanket button carpet chimney compass curtain engine feather fountain hammer helmet
    jacket kettle ladder magnet needle orange pepper pillow pocket puzzle rabbit ribbon
    saddle shadow shovel silver spider sponge statue tiger tomato tunnel turtle violin
    wagon wallet whistle wizard yellow zebra anchor arrow bakery banner barrel beacon
    bottle branch breeze bucket cabin camera canyon carrot cellar cherry circle clover
    copper cotton crayon dragon drawer eagle falcon fence finger flower galaxy ginger
    glacier goose grape gravel guitar hollow honey horse insect iron jungle kitten
    lemon lizard marble meadowlark melon monkey motor nickel oyster paddle palace parrot
    peanut pebble penguin piano planet pottery prism pumpkin quarry quilt radar raisin
    raven rocket saucer scarf school season signal sketch sleeve socket spoon square
    squirrel stable stamp steam stream sugar tablet teapot thunder ticket timber tower
    tractor trumpet tulip velvet vessel walnut weasel wheat willow winder wool yarn
    acorn badge bamboo beetle biscuit boulder bronze cactus canvas cedar chalk cinnamon
    coral cricket crystal daisy dolphin ember fabric fiddle flannel garlic gazelle
    granite harvest hedge heron ivory jasmine juniper kayak kernel lagoon lavender
    lilac linen lobster maple meteor mint moss nectar olive orchard otter pasture pearl
    pine plum pond poppy quartz reed robin saffron salmon sandal sapphire shell slate
    sparrow spruce thistle thyme topaz trout tundra umbrella vanilla walrus wren yak
    """.split()
)
"""Common words (each one or two tokens in most vocabularies); distinct first words of
independent prompts come from here."""


class Workload(StrEnum):
    AGENT = "agent"
    CHAT = "chat"


def words(seed: int, count: int, *, first: str | None = None) -> str:
    """``count`` words from a generator seeded with ``seed``, starting with ``first``."""
    rng = random.Random(seed)
    chosen = [rng.choice(WORDS) for _ in range(count)]
    if first is not None:
        chosen[0] = first
    return " ".join(chosen)


def first_word(index: int) -> str:
    """A first word that no lower ``index`` of the same run had (lower, Title, UPPER
    case cycle after the list: each casing is another token)."""
    word = WORDS[index % len(WORDS)]
    casing = (index // len(WORDS)) % 3
    return (word, word.title(), word.upper())[casing]


WORDS_PER_TOKEN = 1.0
"""Words to make per token wanted: a common word is at least one token, so N words give
at least N tokens and the engine's tokenizer trims the rest."""


def independent_prompt(index: int, n_tokens: int, *, salt: int = 0) -> str:
    """The ``index``-th independent prompt of a run: at least ``n_tokens`` tokens of words,
    its first word unlike any other index's (no shared prefix, so no cache)."""
    return words(
        salt * 1_000_003 + index, max(1, int(n_tokens * WORDS_PER_TOKEN)), first=first_word(index)
    )


def system_prompt(n_tokens: int, *, seed: int = 7) -> str:
    """The system prompt every agent session of a run shares (instructions, tool schemas)."""
    return "System: " + words(seed, max(1, n_tokens))


@dataclass
class AgentSession:
    """One agent conversation: the shared system prompt, then turns that each carry the
    whole history plus a new part (``User: …``), and the replies appended as they come."""

    system: str
    session: int
    history: list[str] = field(default_factory=list)

    def prompt(self, part: str) -> str:
        """The next turn's prompt: everything so far, then ``part`` and the reply cue."""
        return "".join([self.system, *self.history, f"\nUser: {part}\nAssistant:"])

    def answered(self, part: str, reply: str) -> None:
        """Keep the turn just made (its part and the model's reply) in the history."""
        self.history.append(f"\nUser: {part}\nAssistant:{reply}")


def turn_part(session: int, turn: int, n_tokens: int, *, salt: int = 0) -> str:
    """The new part of turn ``turn`` of session ``session`` (a tool result, a request)."""
    seed = (salt * 1_000_003 + session) * 10_007 + turn
    return words(seed, max(1, n_tokens), first=first_word(session * 31 + turn))


def agent_turn_tokens(prompt_tokens: int) -> int:
    """Tokens of each turn's new part: a quarter of the system prompt (at least 8)."""
    return max(8, prompt_tokens // 4)


def largest_prompt(workload: Workload, prompt_tokens: int, max_tokens: int, turns: int) -> int:
    """Tokens of the longest request the workload sends, plus its reply (what one slot's
    context must hold), with a little room for the glue words (``User:`` …)."""
    if workload is Workload.CHAT:
        return prompt_tokens + max_tokens
    part = agent_turn_tokens(prompt_tokens)
    return prompt_tokens + turns * (part + max_tokens + 8)
