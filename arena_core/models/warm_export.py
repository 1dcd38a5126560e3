"""Exporting the shipped warm start of `arena:tiny` from the run that makes it.

`arena-run +experiment=quickstart_warmstart` fine-tunes `arena:tiny-init` with Arena's SFT; this
command writes that run's final checkpoint as `tiny-arithmetic.safetensors` (what `arena:tiny`
loads) and the `.json` record beside it, in `arena_core/models/weights/`:

    arena-run +experiment=quickstart_warmstart paths.runs=/tmp/warm
    python -m arena_core.models.warm_export --runs /tmp/warm --from quickstart_warmstart

The run is deterministic on one thread and the export writes the same bytes for the same
checkpoint, so the shipped file is reproduced bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import torch

from arena_core.models.tiny import WARM_RECIPE, WARM_WEIGHTS


def export_warm_weights(ref: str, out: Path = WARM_WEIGHTS, runs: str | Path = "./runs") -> dict:
    """Write checkpoint `ref` (RUN[:STEP|best|latest], a full arena:tiny fine-tune) as shipped
    warm-start weights: bfloat16, without the tied head, metadata that names no path or time,
    so the same checkpoint always gives the same bytes (the metadata is one key: safetensors
    writes a map's keys in hash order). Writes `<out>.json` (sha256, the run's
    held-out figures, the commands) and returns it."""
    import hashlib
    import json

    from safetensors.torch import load_file, save_file

    from arena_core.errors import ModelLoadError
    from arena_core.store.index import select_checkpoint

    run_dir, ckpt = select_checkpoint(ref, runs)
    weights = ckpt.dir / "model" / "model.safetensors"
    if ckpt.kind != "full" or not weights.is_file():
        raise ModelLoadError(
            f"{ckpt.dir} is not a full checkpoint of arena:tiny (kind {ckpt.kind}); export the "
            f"final checkpoint of `{WARM_RECIPE}` (model.lora.r=0)."
        )
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(str(weights)).items()}
    state.pop("lm_head.weight", None)
    # one metadata key: safetensors writes a metadata map in hash order, so several keys would
    # make the bytes differ from one export to the next (the recipe goes in the .json record)
    meta = {"format": "pt"}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(dict(sorted(state.items())), str(out), metadata=meta)
    out.chmod(0o644)  # safetensors writes 0600; the file ships in the wheel
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    scores = next((e for e in summary.get("evals", []) if e.get("step") == ckpt.step), {})
    record = {
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "base": "arena:tiny-init",
        "recipe": f"{WARM_RECIPE} paths.runs=/tmp/warm",
        "export": "python -m arena_core.models.warm_export --runs /tmp/warm --from quickstart_warmstart",
        "step": ckpt.step,
        "held_out": {k: v for k, v in scores.items() if k != "step"},
        "held_out_on": _eval_settings(run_dir),
    }
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def _eval_settings(run_dir: Path) -> str:
    """How the run measured its held-out figures (from its config.yaml)."""
    import yaml

    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except OSError:
        return ""
    ev, gen = cfg.get("eval") or {}, cfg.get("generation") or {}
    tokens = ev.get("max_new_tokens") or gen.get("max_new_tokens")
    return f"{ev.get('num_prompts')} held-out prompts, greedy, at most {tokens} new tokens"


def main(argv: list[str] | None = None) -> int:
    """`python -m arena_core.models.warm_export --from RUN`: export the shipped warm start."""
    import argparse
    import json

    parser = argparse.ArgumentParser(
        prog="python -m arena_core.models.warm_export",
        description="Write a run's checkpoint as arena:tiny's shipped warm-start weights.",
    )
    parser.add_argument(
        "--from", dest="ref", required=True, metavar="RUN[:STEP]", help="the warm-start run"
    )
    parser.add_argument("--runs", default="./runs", help="the runs directory (paths.runs)")
    parser.add_argument("--out", type=Path, default=WARM_WEIGHTS, help="the .safetensors file")
    args = parser.parse_args(argv)
    print(json.dumps(export_warm_weights(args.ref, args.out, args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
