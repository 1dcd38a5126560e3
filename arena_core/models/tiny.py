"""The embedded tiny model: a ~3M-parameter Qwen2 built from a config, no download needed.

`arena:tiny` is the warm-started model the offline quickstart trains: `arena:tiny-init` (random
weights from a fixed seed) fine-tuned by Arena's own SFT on the `arithmetic` environment's
demonstrations, `arena-run +experiment=quickstart_warmstart`, and shipped as
`weights/tiny-arithmetic.safetensors` (bfloat16, tied head not stored). The shipped file is
regenerated, bit for bit, by

    arena-run +experiment=quickstart_warmstart paths.runs=/tmp/warm
    python -m arena_core.models.warm_export --runs /tmp/warm --from quickstart_warmstart

(`tiny-arithmetic.json` records the sha256, the run's held-out figures and these commands).
`arena:tiny-init` is the same architecture at its seeded random initialisation (tests, and the
starting point of the warm start). It is a real Qwen2 checkpoint once saved, so every tool that
loads Hugging Face models loads it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from arena_core.errors import ModelLoadError
from arena_core.models.catalog import EMBEDDED, EMBEDDED_POSITIONS
from arena_core.models.tokenizer import EOS, PAD, build_tiny_tokenizer

WEIGHTS_DIR = Path(__file__).parent / "weights"
WARM_WEIGHTS = WEIGHTS_DIR / "tiny-arithmetic.safetensors"
WARM_RECIPE = "arena-run +experiment=quickstart_warmstart"
INIT_SEED = 1234


def tiny_config(tokenizer: PreTrainedTokenizerFast | None = None) -> Qwen2Config:
    """4 layers, width 256, GQA 4/2 heads: ~3M parameters, ~0.8 s per 64x64-token step here."""
    tok = tokenizer or build_tiny_tokenizer()
    vocab = (len(tok) + 7) // 8 * 8
    return Qwen2Config(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=EMBEDDED_POSITIONS,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        pad_token_id=tok.convert_tokens_to_ids(PAD),
        eos_token_id=tok.convert_tokens_to_ids(EOS),
        bos_token_id=None,
        use_cache=True,
    )


def build_tiny(name: str = "arena:tiny") -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """The embedded model `name` in float32 with its tokenizer (deterministic)."""
    if name not in EMBEDDED:
        known = ", ".join(EMBEDDED)
        raise ModelLoadError(f"unknown embedded model '{name}'. Embedded models: {known}.")
    tok = build_tiny_tokenizer()
    config = tiny_config(tok)
    rng_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(INIT_SEED)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(rng_state)  # building a model must not disturb the caller's RNG
    if name == "arena:tiny":
        load_warm_weights(model)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    return model.eval(), tok


def load_warm_weights(model: Qwen2ForCausalLM, path: Path = WARM_WEIGHTS) -> None:
    """Load the shipped warm-start weights (stored in bfloat16 to stay small) as float32."""
    from safetensors.torch import load_file

    if not path.is_file():
        raise ModelLoadError(
            f"the warm-start weights of arena:tiny are missing ({path}). Rebuild them with "
            f"`{WARM_RECIPE} paths.runs=/tmp/warm` then `python -m arena_core.models.warm_export "
            f"--runs /tmp/warm --from quickstart_warmstart --out {path}`, or use "
            "`model.name_or_path=arena:tiny-init` for the untrained model."
        )
    state = {k: v.float() for k, v in load_file(str(path)).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # The output head is tied to the embedding, so it is not stored.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ModelLoadError(
            f"{path} does not match the arena:tiny architecture (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}); rebuild it with `{WARM_RECIPE}` and "
            "`python -m arena_core.models.warm_export --from RUN`."
        )
