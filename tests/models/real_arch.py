"""Small random models with real architectures and a real BPE tokenizer, built on the spot.

The Llama copies SmolLM2-135M-Instruct's config shape (GQA, head_dim set, tied embeddings, rope
theta 1e5, eos = pad = `<|im_end|>` = 2, ChatML with its default system prompt) at 2 layers and
width 64; the Qwen2 twin adds what Qwen2 has (q/k/v biases). `write_gguf` writes a model as a
float32 GGUF the way llama.cpp's converter does (its tensor names, q/k rows permuted), so a round
trip through transformers' GGUF reader checks Arena's conversion against the original weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

# SmolLM2-135M-Instruct's chat template (from its GGUF metadata)
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2
CORPUS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
    "How many clips did Natalia sell altogether in April and May? 48 + 24 = 72.",
    "The capital of France is Paris. The capital of Italy is Rome.",
    "<think>12 + 7 = 19</think><answer>19</answer>",
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    "user assistant system What is the answer? Think step by step.",
]
SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)


def bpe_tokenizer(vocab_size: int = 400) -> Any:
    """A byte-level BPE tokenizer trained on CORPUS, ChatML specials at ids 0-2, SmolLM2's template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHATML
    return fast


def build(arch: str = "llama", seed: int = 0, **shape: Any) -> tuple[Any, Any]:
    """(model, tokenizer): a random `arch` ("llama" or "qwen2") model of SHAPE (updated with
    `shape`), float32."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer = bpe_tokenizer()
    config_cls, model_cls = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }[arch]
    config = config_cls(vocab_size=len(tokenizer), **{**SHAPE, **shape})
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():  # an untrained init has near-uniform logits: make them distinctive
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(4.0)
            else:
                p.add_(0.1 * torch.randn_like(p))
    return model, tokenizer


def save(arch: str, out: Path) -> Path:
    model, tokenizer = build(arch)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def _permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's row order for q/k (transformers' GGUF reader reverses it)."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def write_gguf(model: Any, tokenizer: Any, path: Path) -> Path:
    """Write a Llama `model` + BPE `tokenizer` as a float32 GGUF file at `path`."""
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("arena-test-llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(float(c.rms_norm_eps))
    w.add_vocab_size(c.vocab_size)
    w.add_rope_dimension_count(c.head_dim)
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t in SPECIALS else 1 for t, _ in vocab])  # CONTROL / NORMAL
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(tokenizer.chat_template)
    names = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for key, tensor in model.state_dict().items():
        t = tensor.detach().float()
        if key == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif key == "model.norm.weight":
            name = "output_norm.weight"
        elif key == "lm_head.weight":
            if c.tie_word_embeddings:
                continue
            name = "output.weight"
        else:
            _, _, layer, rest = key.split(".", 3)
            module = rest.removesuffix(".weight")
            if module.endswith("q_proj"):
                t = _permute(t, c.num_attention_heads)
            elif module.endswith("k_proj"):
                t = _permute(t, c.num_key_value_heads)
            name = f"blk.{layer}.{names[module]}.weight"
        w.add_tensor(name, t.numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
