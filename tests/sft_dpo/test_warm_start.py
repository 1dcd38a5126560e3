"""The shipped warm start of arena:tiny is made by `arena-run +experiment=quickstart_warmstart`
and exported by `python -m arena_core.models.warm_export --from RUN`: same run, same bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from arena_core.cli.run import execute
from arena_core.models import load_policy
from arena_core.models.tiny import WARM_WEIGHTS, build_tiny, load_warm_weights
from arena_core.models.warm_export import main


def test_shipped_warm_weights_match_their_record():
    record = json.loads(WARM_WEIGHTS.with_suffix(".json").read_text())
    assert hashlib.sha256(WARM_WEIGHTS.read_bytes()).hexdigest() == record["sha256"]
    assert record["recipe"].startswith("arena-run +experiment=quickstart_warmstart")
    assert record["step"] == 300 and record["held_out"]["eval/accuracy"] > 0
    assert WARM_WEIGHTS.stat().st_size < 10_000_000
    warm = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    init = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})
    ids = torch.tensor([warm.tokenizer.encode("What is 1 + 2?")])
    with torch.no_grad():
        assert not torch.equal(warm.model(input_ids=ids).logits, init.model(input_ids=ids).logits)


def test_the_recipe_is_reproducible_bit_for_bit(tmp_path: Path, one_torch_thread, capsys):
    """The warm-start recipe, cut to two small steps, run twice: identical exported bytes, which
    arena:tiny's loader reads back as the run's weights rounded to bfloat16."""
    hashes = []
    for name in ("a", "b"):
        runs = tmp_path / name
        overrides = ["+experiment=quickstart_warmstart", f"paths.runs={runs}"]
        overrides += ["train.max_steps=2", "algo.batch_size=4", "eval.every=0"]
        overrides += ["eval.num_prompts=2", "eval.max_new_tokens=4", "logger.names=[csv]"]
        assert execute(overrides) == 0
        out = tmp_path / f"{name}.safetensors"
        args = ["--runs", str(runs), "--from", "quickstart_warmstart", "--out", str(out)]
        assert main(args) == 0
        record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert record == json.loads(out.with_suffix(".json").read_text())
        assert record["step"] == 2 and "eval/loss" in record["held_out"]
        hashes.append(hashlib.sha256(out.read_bytes()).hexdigest())
        assert hashes[-1] == record["sha256"]
    assert hashes[0] == hashes[1]
    (run,) = (tmp_path / "a").iterdir()
    trained = load_file(str(run / "checkpoints/step_000002/model/model.safetensors"))
    model, _ = build_tiny("arena:tiny-init")
    load_warm_weights(model, tmp_path / "a.safetensors")
    for key, value in model.state_dict().items():
        stored = trained.get(key, trained["model.embed_tokens.weight"])  # the head is tied
        torch.testing.assert_close(value, stored.to(torch.bfloat16).float(), rtol=0, atol=0)
