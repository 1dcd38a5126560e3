"""The Arena/AgileRL manifest: maps to the same validated config as overrides, reports every problem
with its manifest path, and `arena manifest export` round-trips through `arena-run --manifest`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from arena_core.cli import main as arena_main
from arena_core.cli import run as arena_run
from arena_core.config import compose_config
from arena_core.errors import ConfigError
from arena_core.population.manifest import compose_manifest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "manifests" / "grpo_gsm8k.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(text)
    return path


def test_gsm8k_tutorial_manifest_maps_to_the_config() -> None:
    cfg = compose_manifest(EXAMPLE, run=False)
    algo, evo, model = cfg["algo"], cfg["evolution"], cfg["model"]
    assert algo["name"] == "grpo"  # AgileRL's "GRPO"
    assert (algo["lr"], algo["beta"], algo["group_size"], algo["max_grad_norm"]) == (
        5e-6,
        0.001,
        8,
        0.1,
    )
    assert algo["eps_low"] == algo["eps_high"] == 0.2  # clip_coef
    assert cfg["env"]["name"] == "gsm8k"
    assert model["lora"]["r"] == 16 and model["lora"]["alpha"] == 64
    assert model["lora"]["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert evo["enabled"] and evo["population_size"] == 2 and evo["evo_steps"] == 5
    assert evo["selection"] == {"kind": "tournament", "tournament_size": 2, "elitism": True}
    assert evo["mutation"]["probabilities"] == {"no_mut": 0.1, "rl_hp_mut": 0.6}
    assert evo["mutation"]["rl_hp_selection"]["lr"]["max"] == 1e-5
    assert evo["seed"] == 42
    # the same config as the equivalent overrides
    same = compose_config(
        [
            "+algo=grpo",
            "+env=gsm8k",
            "model.name_or_path=Qwen/Qwen2.5-3B",
            "model.lora.r=16",
            "model.lora.alpha=64",
            "model.lora.dropout=0.0",
            "train.max_steps=500",
            "evolution.enabled=true",
            "evolution.population_size=2",
            "evolution.evo_steps=5",
            "evolution.seed=42",
            "+evolution.mutation.rl_hp_selection.lr.min=1e-7",
            "+evolution.mutation.rl_hp_selection.lr.max=1e-5",
            "+evolution.mutation.rl_hp_selection.beta.min=1e-4",
            "+evolution.mutation.rl_hp_selection.beta.max=1e-2",
            "+evolution.mutation.rl_hp_selection.group_size.min=4",
            "+evolution.mutation.rl_hp_selection.group_size.max=12",
        ]
    )
    assert same == cfg


@pytest.mark.parametrize(
    "overrides",
    [
        ["+experiment=quickstart"],
        [
            "+experiment=quickstart",
            "evolution.enabled=true",
            "evolution.population_size=3",
            "+evolution.mutation.rl_hp_selection.lr.min=1e-6",
            "+evolution.mutation.rl_hp_selection.lr.max=1e-3",
            "env.user_template='Q: {question} it\\'s \"x\"'",
            "generation.stop=[a,'b c']",
            "model.lora.r=8",
            "algo.lr=1e-5",
            "seed=3",
        ],
    ],
    ids=["quickstart", "population"],
)
def test_export_round_trips_through_arena_run_manifest(tmp_path, capsys, overrides) -> None:
    assert arena_main.main(["manifest", "export", *overrides]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Arena manifest") and "algorithm:" in text
    path = _write(tmp_path, text)
    assert compose_manifest(path) == compose_config(overrides)
    if "evolution.enabled=true" in overrides:
        assert "pop_size: 3" in text and "stop:" in text  # arena section carries the rest


def test_an_env_with_a_required_key_exports_and_round_trips(tmp_path, capsys) -> None:
    """+env=dataset has no default path: its defaults are composed without one (export used to
    fail validating them), and the manifest carries the run's path."""
    import json

    data = tmp_path / "prefs.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": "x"}) + "\n"
                for i in range(8))
    )  # fmt: skip
    overrides = ["+algo=dpo", "+env=dataset", f"env.path={data}", "model=tiny", "algo.beta=0.2"]
    assert arena_main.main(["manifest", "export", *overrides]) == 0
    text = capsys.readouterr().out
    assert f"path: {data}" in text and "beta: 0.2" in text
    assert compose_manifest(_write(tmp_path, text)) == compose_config(overrides)


def test_overrides_win_aliases_work_and_text_arrives_verbatim(tmp_path) -> None:
    path = _write(
        tmp_path,
        "algorithm: {name: grpo, lr: 1.0e-5}\ndataset: {name: arithmetic}\n"
        "training: {pop_size: 1, max_steps: 7}\n",
    )
    cfg = compose_manifest(path, ["algo.lr=3e-4"])
    assert cfg["algo"]["lr"] == 3e-4 and cfg["env"]["name"] == "arithmetic"
    assert cfg["train"]["max_steps"] == 7
    assert cfg["evolution"]["enabled"] is False  # pop_size 1: a single run, as in AgileRL
    # text no override could carry (line breaks, backslashes, quotes) arrives verbatim
    prompt = "Think first.\nThen answer in <answer> tags: it's C:\\x\\"
    stop = ["a\\", "b'c", '"d"']
    manifest = {
        "algorithm": {"name": "grpo"},
        "environment": {"name": "arithmetic", "system_prompt": prompt},
        "arena": {"generation": {"stop": stop}},
    }
    path.write_text(yaml.safe_dump(manifest))
    cfg = compose_manifest(path)
    assert cfg["env"]["system_prompt"] == prompt and cfg["generation"]["stop"] == stop


BAD = """\
algorithm:
  name: grpo
  lrr: 1.0e-5
  pop_size: 4
environment: {name: arithmetic}
network:
  lora: {rr: 8}
training: {max_stepz: 3, pop_size: 2}
selection: {tournament_size: 3}
mutation:
  rl_hp_selection:
    lr: {min: 1.0e-3, max: 1.0e-2}
mutatoin: {}
evo_steps: 3
"""


def test_bad_manifest_lists_every_problem_by_manifest_path(tmp_path, capsys) -> None:
    path = _write(tmp_path, BAD)
    with pytest.raises(ConfigError) as info:
        compose_manifest(path)
    problems = info.value.problems
    text = "\n".join(problems)
    expected = [
        "unknown top-level key 'mutatoin': not a manifest section, did you mean 'mutation'?",
        "unknown top-level key 'evo_steps': it belongs under training (training.evo_steps)",
        "algorithm.pop_size: 'pop_size' does not belong in algorithm; move it under training",
        "algorithm.lrr [algo.lrr]: unknown key, did you mean 'lr'?",
        "network.lora.rr [model.lora.rr]: unknown key, did you mean 'r'?",
        "training.max_stepz [train.max_stepz]: unknown key, did you mean 'max_steps'?",
        "population_size 2 is below selection.tournament_size 3",
        "mutation.rl_hp_selection.lr [evolution.mutation.rl_hp_selection.lr]: the range",
    ]
    for line in expected:
        assert sum(line in p for p in problems) == 1, (line, text)
    assert len(problems) == len(expected)
    # the real CLI: one message, exit code 2, no traceback
    assert arena_run.main(["--manifest", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"Invalid manifest {path} (8 problems)" in err and "Traceback" not in err


def test_unreadable_manifests_are_explained(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no such manifest file"):
        compose_manifest(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        compose_manifest(_write(tmp_path, "algorithm: [unclosed\n"))
    with pytest.raises(ConfigError, match="a manifest is a mapping"):
        compose_manifest(_write(tmp_path, "- a list\n"))
    with pytest.raises(ConfigError, match="a folder, not a manifest file"):
        compose_manifest(tmp_path)
    binary = tmp_path / "weights.yaml"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(ConfigError, match="cannot be read as UTF-8 text"):
        compose_manifest(binary)
    with pytest.raises(ConfigError) as info:
        compose_manifest(_write(tmp_path, "algorithm: grpo\nenvironment: {name: arithmetic}\n"))
    assert "got 'grpo' (algorithm: {name: grpo})" in info.value.problems[0]
    both = "algorithm: {name: grpo}\nenvironment: {name: arithmetic}\ndataset: {name: gsm8k}\n"
    with pytest.raises(ConfigError, match="both given: keep one"):
        compose_manifest(_write(tmp_path, both))
    with pytest.raises(ConfigError) as info:
        compose_manifest(_write(tmp_path, "algorithm: {lr: 1.0e-5}\n"))
    assert info.value.problems == [
        "algorithm.name: missing; a manifest names its algorithm (algorithm: {name: grpo, ...})",
        "environment: missing; a manifest names its environment (environment: {name: gsm8k, ...})",
    ]


def test_a_key_given_twice_is_refused_never_silently_dropped(tmp_path, capsys) -> None:
    """YAML keeps the last of two equal keys and a manifest maps several spellings onto one
    config key: either way one value would win without a word, so the run is refused."""
    twice = (
        "algorithm:\n  name: grpo\n  lr: 1.0e-4\n  lr: 2.0e-4\nenvironment: {name: arithmetic}\n"
    )
    path = _write(tmp_path, twice)
    assert arena_run.main(["--manifest", str(path), "dry_run=true"]) == 2
    err = capsys.readouterr().err
    assert "key 'lr' is given twice in one mapping (lines 3 and 4): keep one" in err
    spellings = {
        "algorithm: {name: grpo, lr: 1.0e-3}\nenvironment: {name: arithmetic}\n"
        "arena: {algo: {lr: 0.5}}\n": "arena.algo.lr and algorithm.lr both set algo.lr",
        "algorithm: {name: grpo, clip_coef: 0.3, eps_low: 0.1}\n"
        "environment: {name: arithmetic}\n": "algorithm.eps_low and algorithm.clip_coef both",
        "algorithm: {name: grpo, temperature: 0.5}\nenvironment: {name: arithmetic}\n"
        "arena: {generation: {temperature: 0.9}}\n": "both set generation.temperature",
    }
    for text, message in spellings.items():
        with pytest.raises(ConfigError) as info:
            compose_manifest(_write(tmp_path, text), run=False)
        assert [p for p in info.value.problems if message in p], info.value.problems


def test_docs_manifest_example_composes(tmp_path) -> None:
    """docs/populations.md's manifest block is a working manifest (docs kept true to the code)."""
    page = (EXAMPLE.parents[2] / "docs" / "populations.md").read_text()
    section = page.split("\n## The manifest\n", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = compose_manifest(_write(tmp_path, block), run=False)
    assert cfg["evolution"]["enabled"] and cfg["generation"]["max_new_tokens"] == 256
    assert cfg["model"]["lora"]["alpha"] == 64 and cfg["algo"]["eps_high"] == 0.2
