"""Writing a checkpoint export: a directory other tools load without Arena.

`merged`: a plain Hugging Face model directory (`AutoModelForCausalLM.from_pretrained(out)` and
the tokenizer); a LoRA checkpoint is folded into its base first. `adapter`: the PEFT adapter
(`PeftModel.from_pretrained(base, out)`), with the run's tokenizer beside it. A classic-RL run's
checkpoint is a policy network, not a language model: `merged` copies it as it is
(`model.safetensors` + `arena_policy.json`, which `load_gym_policy(out)` loads), and the manifest
names its algorithm (`source.algorithm`), so nothing mistakes it for a Hugging Face model.

Both are assembled in a temporary sibling directory and renamed into place only when complete;
the manifest and its completion marker (`arena_core.store.export_manifest`) are written last. This lives
with the models because it loads them; the files' format stays with the run directories.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from arena_core.errors import ArenaError
from arena_core.models.cache import resolve_model
from arena_core.models.loading import load_policy
from arena_core.store.atomic import atomic_write_json, folder_problem
from arena_core.store.export_manifest import FORMATS, check_lora_alpha, write_manifest
from arena_core.store.index import CheckpointInfo, checkpoint_kind
from arena_core.store.rundir import read_config

MAX_SHARD = "2GB"


def export_checkpoint(
    run_dir: Path, ckpt: CheckpointInfo, out: str | Path, *, fmt: str = "merged"
) -> Path:
    """Write checkpoint `ckpt` of `run_dir` to `out` as `fmt` (see the module docstring)."""
    if fmt not in FORMATS:
        raise ArenaError(f"unknown export format '{fmt}'; use one of: {', '.join(FORMATS)}")
    algorithm = checkpoint_kind(run_dir, ckpt)
    if algorithm != "llm" and fmt == "adapter":
        raise ArenaError(
            f"{run_dir.name} is a '{algorithm}' run: its checkpoints are a policy network "
            "(arena_policy.json + model.safetensors), not a language model, so there is no adapter; "
            "export it with --format merged, which copies the policy as it is "
            "(arena_core.classic_rl.policy.load_gym_policy(DIR) loads it)."
        )
    out = Path(out)
    if out.is_file() or (problem := folder_problem(out.parent)) is not None:
        why = f"{out} is a file" if out.is_file() else problem
        raise ArenaError(f"cannot export to {out}: {why}; pick another --out.")
    if out.exists() and any(out.iterdir()):
        raise ArenaError(f"{out} already exists and is not empty; pick a new --out or delete it.")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        if algorithm != "llm":
            _copy_files(ckpt.weights_dir, tmp)
        elif fmt == "adapter":
            _export_adapter(run_dir, ckpt, tmp)
        elif ckpt.kind == "lora":
            _export_merged_lora(ckpt, tmp)
        else:
            _copy_files(ckpt.weights_dir, tmp)
        source = {
            "run": str(run_dir.resolve()),
            "step": ckpt.step,
            "kind": ckpt.kind,
            "algorithm": algorithm,
        }
        write_manifest(tmp, fmt=fmt, source=source)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except OSError as exc:  # a read-only mount, a full disk: said, and nothing half-written left
        shutil.rmtree(tmp, ignore_errors=True)
        why = exc.strerror or str(exc)
        where = f" ({exc.filename})" if exc.filename else ""
        raise ArenaError(
            f"cannot export to {out}: {why}{where}; nothing was written there. Pick another "
            "--out on a writable disk with room for the weights."
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _copy_files(src: Path, dst: Path) -> None:
    for p in sorted(src.iterdir()):
        if p.is_file():
            shutil.copy2(p, dst / p.name)


def _export_merged_lora(ckpt: CheckpointInfo, dst: Path) -> None:
    """Base + adapter folded together. peft merges module by module in place (no second copy of
    the weights), and the result is written in shards of at most MAX_SHARD."""
    policy = load_policy({"name_or_path": str(ckpt.weights_dir), "lora": {"r": 0}})
    merged = policy.model.merge_and_unload()
    merged.save_pretrained(str(dst), max_shard_size=MAX_SHARD)
    policy.tokenizer.save_pretrained(str(dst))


def _export_adapter(run_dir: Path, ckpt: CheckpointInfo, dst: Path) -> None:
    if ckpt.kind != "lora":
        raise ArenaError(
            f"step {ckpt.step} of {run_dir} holds full weights (the run trained every weight: "
            "model.lora.r=0), so there is no adapter; export it with --format merged."
        )
    _copy_files(ckpt.weights_dir, dst)
    check_lora_alpha(dst, _run_lora_alpha(run_dir))
    resolve_adapter_base(dst)
    # The tokenizer the run trained with, so the adapter folder is all a user needs beside the base.
    policy = load_policy({"name_or_path": str(ckpt.weights_dir), "lora": {"r": 0}})
    policy.tokenizer.save_pretrained(str(dst))


def resolve_adapter_base(adapter_dir: Path) -> str:
    """Make the adapter's `base_model_name_or_path` something `peft` loads on its own
    (`AutoPeftModelForCausalLM.from_pretrained(adapter_dir)`), and return it.

    A model of Arena's cache (`smollm2-135m-instruct`, a `.gguf` file) becomes its cache
    directory and a relative local path an absolute one; hub ids stay as they are. Embedded
    `arena:` bases stay too: only Arena builds them (`load_policy(adapter_dir)` does).
    """
    path = adapter_dir / "adapter_config.json"
    cfg = json.loads(path.read_text())
    base = str(cfg.get("base_model_name_or_path") or "")
    if not base or base.startswith("arena:"):
        return base
    resolved = resolve_model(base, fetch=False)
    if Path(resolved).expanduser().exists():
        resolved = str(Path(resolved).expanduser().resolve())
    if resolved != base:
        cfg["base_model_name_or_path"] = resolved
        atomic_write_json(path, cfg)
    return resolved


def _run_lora_alpha(run_dir: Path) -> float | None:
    try:
        lora = (read_config(run_dir).get("model") or {}).get("lora") or {}
    except OSError:
        return None
    return float(lora["alpha"]) if lora.get("alpha") is not None else None
