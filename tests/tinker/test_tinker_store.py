"""A checkpoint is whole or absent: a save that dies midway leaves the previous one as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig

from arena_core.tinker.store import CheckpointError, Store


class _Boom(RuntimeError):
    pass


class _FailingConfig:
    """An adapter config whose save dies after the tensors were written (a kill mid-save)."""

    def save_pretrained(self, path: str) -> None:
        raise _Boom("killed")


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    store = Store(tmp_path)
    ref = store.ref("run-1", "weights", "latest")
    first = {"a": torch.ones(3)}
    meta = {"base_model": "arena:tiny", "lora": {"rank": 4}}
    store.write(ref, adapter=first, adapter_config=LoraConfig(r=4), meta=meta, optimizer=None)
    with pytest.raises(_Boom):
        store.write(
            ref,
            adapter={"a": torch.zeros(3)},
            adapter_config=_FailingConfig(),
            meta=meta,
            overwrite=True,
        )
    assert torch.equal(store.read_adapter(store.parse(ref.path))["a"], first["a"])
    assert sorted(p.name for p in ref.dir.parent.iterdir()) == ["index.json", "weights-latest"]
    assert [c["tinker_path"] for c in store.checkpoints("run-1")] == [ref.path]


def test_paths_that_name_nothing_say_what_exists(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with pytest.raises(CheckpointError, match="tinker://RUN/weights/NAME"):
        store.parse("s3://bucket/x")
    with pytest.raises(CheckpointError, match="no such run here"):
        store.parse("tinker://nope/weights/x")
    with pytest.raises(CheckpointError, match="not a valid checkpoint name"):
        store.ref("run", "weights", "../escape")
