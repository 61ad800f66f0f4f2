"""vLLM's memory, priced before booting (:mod:`homelab.plan.vllm.plan`).

vLLM spends ``--gpu-memory-utilization`` × the card in a fixed order (weights,
activation scratch, CUDA graphs, then the KV cache) and only finds out whether the
asked-for context fits minutes into its boot. This package does that arithmetic
first, from the model's config.json and weight sizes and the card's NVML figures.
"""
