"""vLLM as an engine: its command line, its start-up log, and the supervisor's view of it.

Pricing a vLLM start before booting is planning and lives in :mod:`homelab.plan.vllm`.
"""
