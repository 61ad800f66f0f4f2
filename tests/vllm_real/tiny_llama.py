"""Write a tiny random Llama in Hugging Face format: config.json, safetensors, a tokenizer.

Run by the vLLM environment's Python (transformers, tokenizers and torch live there,
not in homelab's): ``PYTHON tiny_llama.py OUT_DIR [--max-position N]``. The tokenizer is
a byte-level BPE trained on a few sentences here (nothing is downloaded); the weights
are random with a fixed seed, in bfloat16. head_dim is 64 (vLLM's CPU attention
rejects 16).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "homelab plans and runs a local language model on one machine.",
    "vLLM prices its KV cache in blocks of tokens; llama.cpp in cells.",
    "Once upon a time there was a small model that answered every question.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--max-position", type=int, default=131072)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=4)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.model_max_length = args.max_position
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=args.kv_heads,
        head_dim=64,
        max_position_embeddings=args.max_position,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    config.torch_dtype = torch.bfloat16
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    print(json.dumps({"dir": str(out), "files": sorted(p.name for p in out.iterdir())}))


if __name__ == "__main__":
    main()
