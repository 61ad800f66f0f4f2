"""Measuring what the card really serves: the recipe's fifth step (``homelab bench``).

The plan's slot count is a memory answer; this package measures the compute answer by
loading the running engine with traffic and watching the first token (UI-free).
"""
