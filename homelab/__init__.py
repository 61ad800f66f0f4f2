"""homelab: run a local LLM well on one home NVIDIA card.

Nothing is imported eagerly here, so ``import homelab`` stays cheap and UI-free.
"""

__version__ = "0.1.0"
