"""`arena checkpoints export`: merged and adapter exports reload outside Arena, same outputs."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM

from arena_core.cli.main import main
from arena_core.engines.base import SamplingParams
from arena_core.engines.torch_backend import TorchBackend
from arena_core.errors import ArenaError
from arena_core.models import load_policy
from arena_core.store.export_manifest import COMPLETE, MANIFEST, verify_export

PROMPTS = ["12+3=", "What is 9*9?"]
GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)


def _greedy(model, tokenizer) -> list[str]:
    return [c.text for c in TorchBackend(model, tokenizer).generate_text(PROMPTS, GREEDY)]


def test_merged_export_is_a_plain_hf_dir_with_the_same_greedy_outputs(quick_run, tmp_path) -> None:
    out = tmp_path / "merged"
    assert main(["checkpoints", "export", f"{quick_run.path}:best", "--out", str(out)]) == 0
    manifest = verify_export(out)
    assert (out / COMPLETE).is_file() and "model.safetensors" in manifest["files"]
    assert manifest["source"]["step"] == quick_run.best().step
    model = AutoModelForCausalLM.from_pretrained(out)
    policy = load_policy({"name_or_path": str(out), "lora": {"r": 0}})  # its tokenizer too
    trained = load_policy({"name_or_path": str(quick_run.best().path), "lora": {"r": 0}})
    assert _greedy(model, policy.tokenizer) == _greedy(trained.model, trained.tokenizer)
    (out / "config.json").write_text("{}")
    with pytest.raises(ArenaError, match="config.json"):
        verify_export(out)


def test_lora_merged_and_adapter_exports_reload_with_the_same_outputs(lora_run, tmp_path) -> None:
    from peft import PeftModel

    ckpt = lora_run.latest()  # two trained steps: the adapter must change the outputs
    assert ckpt.kind == "lora"
    trained = load_policy({"name_or_path": str(ckpt.path), "lora": {"r": 0}})
    expected = _greedy(trained.model, trained.tokenizer)

    merged = ckpt.export(tmp_path / "merged", format="merged")
    model = AutoModelForCausalLM.from_pretrained(merged)
    assert not any("lora_" in n for n, _ in model.named_parameters())
    assert _greedy(model, trained.tokenizer) == expected

    adapter = ckpt.export(tmp_path / "adapter", format="adapter")
    verify_export(adapter)
    assert json.loads((adapter / "adapter_config.json").read_text())["lora_alpha"] == 8
    base = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    peft = PeftModel.from_pretrained(base.model, str(adapter))
    assert _greedy(peft, trained.tokenizer) == expected
    plain = _greedy(
        load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}}).model, base.tokenizer
    )
    assert plain != expected  # the adapter matters, so equal outputs mean it was applied


def test_adapter_export_of_a_full_run_says_what_to_do(quick_run, tmp_path) -> None:
    with pytest.raises(ArenaError, match="--format merged"):
        quick_run.best().export(tmp_path / "a", format="adapter")
    assert not (tmp_path / "a").exists()
    out = tmp_path / "taken"
    out.mkdir()
    (out / "x").write_text("x")
    with pytest.raises(ArenaError, match="not empty"):
        quick_run.best().export(out)
    assert not (out / MANIFEST).exists()
    # a file where the folder, or one of its parents, would go: said, not a NotADirectoryError
    for target, why in ((out / "x", "is a file"), (out / "x" / "y", "is a file, not a folder")):
        with pytest.raises(ArenaError, match=f"cannot export to {target}: .*{why}"):
            quick_run.best().export(target)
    assert (out / "x").read_text() == "x"


def test_a_disk_that_fills_mid_export_is_said_and_leaves_nothing(
    quick_run, tmp_path, monkeypatch, capsys
) -> None:
    """A write that fails with the disk full (or a read-only mount) is a message naming --out,
    and no half-written folder is left behind, neither the export nor its temporary folder."""
    import errno
    import shutil

    def full(src, dst, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(shutil, "copy2", full)
    out = tmp_path / "exports" / "merged"
    code = main(["checkpoints", "export", f"{quick_run.path}:best", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"cannot export to {out}: No space left on device" in err and "--out" in err
    assert not out.exists() and list(out.parent.iterdir()) == []
