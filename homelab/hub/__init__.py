"""Getting models: Hugging Face downloads, remote GGUF headers, quant choice, presets."""
