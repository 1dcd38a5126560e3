"""`model.chat_template`: a base model (a tokenizer without a chat template) trains, is checked
and is deployed through the template the run names, and without one it is refused with that fix.

The base model is the tiny model saved with its template removed, as a base checkpoint is
published; every step goes through the real entry points (`arena.train`, `arena generate`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import OpenAI

import arena
from arena_core.cli.main import main
from arena_core.config import compose_run_config
from arena_core.errors import ConfigError
from arena_core.models import load_policy
from arena_core.models.tokenizer import CHAT_TEMPLATE
from arena_core.validate.preflight import ValidationFailed

RUN = ["+experiment=quickstart", "train.max_steps=1", "train.prompts_per_step=2"]
RUN += ["algo.group_size=2", "eval.num_prompts=2", "generation.max_new_tokens=12"]
RUN += ["logger.names=[csv]", "train.checkpoint_every=1"]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base") / "tiny-base"
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    policy.tokenizer.chat_template = None
    policy.model.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)
    return out


def test_a_base_model_without_a_template_is_refused_with_the_fix(base_model, tmp_path) -> None:
    runs = f"paths.runs={tmp_path}"
    fix = r"no chat template .* set model.chat_template=chatml"
    with pytest.raises(ValidationFailed, match=fix):  # the pre-flight's env.chat_template check
        arena.train([*RUN, f"model.name_or_path={base_model}", runs])
    with pytest.raises(ConfigError, match=fix):  # unchecked: the first prompt, not transformers'
        arena.train([*RUN, f"model.name_or_path={base_model}", runs], check=False)


def test_a_typo_or_a_broken_template_is_the_keys_error() -> None:
    with pytest.raises(ConfigError, match="model.chat_template.*'chatlm' is not 'chatml'"):
        compose_run_config(["+experiment=quickstart", "model.chat_template=chatlm"])
    with pytest.raises(ConfigError, match="does not parse"):
        compose_run_config(["+experiment=quickstart", "model.chat_template='{{ m.content }'"])


def test_the_template_a_base_model_trains_with_is_the_one_it_is_deployed_with(
    base_model, tmp_path, capsys
) -> None:
    template = tmp_path / "plain.jinja"
    template.write_text(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    cases = [("chatml", CHAT_TEMPLATE, 0), (str(template), template.read_text(), 0)]
    cases += [(str(template), template.read_text(), 4)]  # a LoRA run: the adapter carries it
    for setting, expected, rank in cases:
        run = arena.train(
            [*RUN, f"model.name_or_path={base_model}", f"model.chat_template={setting}"]
            + [f"model.lora.r={rank}", f"paths.runs={tmp_path / 'runs'}"]
        )
        assert run.summary["status"] == "finished"
        saved = load_policy({"name_or_path": str(run.best().path), "lora": {"r": 0}})
        assert saved.tokenizer.chat_template == expected  # the checkpoint carries it
        capsys.readouterr()
        assert main(["generate", f"{run.path}:best", "What is 2+3?", "--max-tokens", "4"]) == 0
        with arena.deploy(run.best()) as dep:  # the server renders with it too
            client = OpenAI(base_url=f"{dep.url}/v1", api_key="none", max_retries=0)
            r = client.chat.completions.create(
                model=client.models.list().data[0].id,
                messages=[{"role": "user", "content": "What is 2+3?"}],
                max_tokens=2,
                extra_body={"return_token_ids": True},
            )
        text = saved.tokenizer.decode(r.prompt_token_ids)
        assert text == saved.tokenizer.apply_chat_template(
            [{"role": "user", "content": "What is 2+3?"}],
            tokenize=False,
            add_generation_prompt=True,
        )
