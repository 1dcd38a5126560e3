"""tinker-cookbook's supervised training loop (the one `sl_basic` runs), as installed, trains
through `arena tinker serve` on the tiny model and the cookbook's own example conversations."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("tinker_cookbook")

API_KEY = "tml-arena-test"
BASE = "arena:tiny"


def test_the_cookbook_supervised_loop_lowers_its_loss(
    server, tokenizer, tmp_path: Path, monkeypatch
) -> None:
    import tinker_cookbook
    from tinker_cookbook import tokenizer_utils
    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig
    from transformers import AutoTokenizer

    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    tokenizer_dir = server.service.store.tokenizer_dir(BASE)  # written when the base loaded
    tokenizer_utils.register_tokenizer(BASE, lambda: AutoTokenizer.from_pretrained(tokenizer_dir))
    data = Path(tinker_cookbook.__file__).parent / "example_data" / "conversations.jsonl"
    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=BASE,
        renderer_name="role_colon",  # plain "User: ... Assistant: ...": any tokenizer renders it
        max_length=256,
        batch_size=8,
        train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
    )
    config = train.Config(
        log_path=str(tmp_path / "log"),
        model_name=BASE,
        recipe_name="recipe_sl_basic",
        renderer_name="role_colon",
        dataset_builder=FromConversationFileBuilder(common_config=common, file_path=str(data)),
        learning_rate=1e-2,
        lr_schedule="constant",
        num_epochs=1,
        lora_rank=8,
        base_url=server.url,
        eval_every=0,
        save_every=0,
        max_steps=4,
    )
    asyncio.run(train.main(config))
    rows = [json.loads(x) for x in (tmp_path / "log" / "metrics.jsonl").read_text().splitlines()]
    nll = [r["train_mean_nll"] for r in rows if "train_mean_nll" in r]
    assert len(nll) == 4 and nll[-1] < nll[0], nll
