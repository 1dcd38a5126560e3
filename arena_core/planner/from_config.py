"""Planning from a resolved run config (what `arena plan` and `arena-run` call).

Config keys read (dotted): ``model.name_or_path``, ``model.lora.r``, ``hardware.name``,
``hardware.count``, ``train.prompts_per_step``, ``algo.group_size``,
``generation.max_new_tokens``, ``env.max_prompt_tokens`` (default 256), ``algo.beta`` /
``algo.kl_coef`` (a reference model when > 0), ``runtime.mode`` (``sync`` serialises generation
and learning), ``train.micro_batch_tokens`` (a pin when set) and the optional ``plan`` section of
pinned fields. ``hardware.name`` ``auto`` (or ``local``) detects this machine.
"""

from __future__ import annotations

from typing import Any

from arena_core.errors import ConfigError
from arena_core.planner.hardware import HardwareProfile, get_profile
from arena_core.planner.model_spec import ModelSpec
from arena_core.planner.plan import NoPlanFits, PlanResult, Workload

DEFAULT_PROMPT_TOKENS = 256
_MISSING = object()


def lookup(cfg: dict[str, Any], dotted: str, default: Any = _MISSING) -> Any:
    """``lookup(cfg, "model.lora.r", 0)``: nested dict access by a dotted key."""
    node: Any = cfg
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif hasattr(node, part) and not isinstance(node, dict):
            node = getattr(node, part)
        else:
            if default is _MISSING:
                raise ConfigError(f"{dotted}: missing; the planner needs it")
            return default
    return node


def workload_from_config(cfg: dict[str, Any], prompt_tokens: int | None = None) -> Workload:
    """The step's work; `prompt_tokens` (measured from the env's own prompts) overrides
    `env.max_prompt_tokens` and the 256-token default when the caller could measure it."""
    problems = []
    values: dict[str, int] = {}
    for field, key, default in (
        ("prompts_per_step", "train.prompts_per_step", _MISSING),
        ("group_size", "algo.group_size", _MISSING),
        ("completion_tokens", "generation.max_new_tokens", _MISSING),
        ("prompt_tokens", "env.max_prompt_tokens", DEFAULT_PROMPT_TOKENS),
    ):
        try:
            raw = lookup(cfg, key, default)
            values[field] = int(raw if raw is not None else DEFAULT_PROMPT_TOKENS)
        except ConfigError as exc:
            problems.extend(exc.problems)
        except (TypeError, ValueError):
            problems.append(f"{key}: expected an integer, got {lookup(cfg, key)!r}")
    if problems:
        raise ConfigError(problems, header="Cannot plan this configuration")
    if prompt_tokens and lookup(cfg, "env.max_prompt_tokens", None) is None:
        values["prompt_tokens"] = int(prompt_tokens)
    beta = lookup(cfg, "algo.beta", None)
    if beta is None:
        beta = lookup(cfg, "algo.kl_coef", 0.0)
    mode = lookup(cfg, "runtime.mode", "async")
    backend = str(lookup(cfg, "backend.name", "torch") or "torch")
    return Workload(
        kl_ref=bool(beta and float(beta) > 0),
        overlap=mode != "sync",
        engine_shares_module=backend == "torch",
        engine_copy_bytes=bf16_copy_bytes()
        if backend == "torch" and lookup(cfg, "backend.decode_dtype", None) == "bfloat16"
        else 0,
        **values,
    )


def bf16_copy_bytes() -> int:
    """Bytes per multiplying parameter a CPU bf16 decode holds besides the trainer's weights:
    the bf16 copy, and where oneDNN packs bf16 weights on this CPU the packed twin Arena's
    decode step multiplies by (`engines/packed_linear.py`; an upper bound for models that take
    the module path)."""
    from arena_core.engines import packed_linear

    return 4 if packed_linear.AVAILABLE else 2


def hardware_from_config(cfg: dict[str, Any]) -> tuple[HardwareProfile, int]:
    """The profile and device count; ``hardware`` may be a name or a section with ``name``."""
    section = lookup(cfg, "hardware", None)
    if section is None or section in ("local", "auto"):
        from arena_core.planner.hardware import detect_local_profile

        hw = detect_local_profile()
        count = 1
    elif isinstance(section, str):
        hw, count = get_profile(section), 1
    else:
        name = str(lookup(cfg, "hardware.name", "auto"))
        hw = get_profile("local" if name == "auto" else name)
        count = int(lookup(cfg, "hardware.count", 1) or 1)
        if hw.kind == "cpu" and count > 1:
            from arena_core.planner.hardware import split_cpu

            hw = split_cpu(hw, count)
    return hw, count


def plan_from_config(
    cfg: dict[str, Any],
    model_spec: ModelSpec | dict[str, Any] | None = None,
    prompt_tokens: int | None = None,
) -> PlanResult:
    """Plan the run described by a resolved config dict.

    ``model_spec`` lets the caller supply the spec (a ModelSpec or a config.json-like dict) for
    names the planner cannot read itself, such as the embedded ``arena:tiny`` model;
    ``prompt_tokens`` the mean prompt length measured on the env (see ``workload_from_config``).
    """
    from arena_core.planner.search import make_plan

    name = str(lookup(cfg, "model.name_or_path"))
    if isinstance(model_spec, ModelSpec):
        spec = model_spec
    elif isinstance(model_spec, dict):
        spec = ModelSpec.from_dict(model_spec, name=name)
    elif name.startswith("arena:"):
        raise ConfigError(
            f"model.name_or_path={name}: an embedded model; pass its config as "
            "plan_from_config(cfg, model_spec=...)"
        )
    else:
        spec = ModelSpec.from_hf_config(name)
    lora = int(lookup(cfg, "model.lora.r", 0) or 0)
    hw, count = hardware_from_config(cfg)
    pinned = dict(lookup(cfg, "plan", None) or {})
    micro = lookup(cfg, "train.micro_batch_tokens", None)
    if micro and "micro_batch_tokens" not in pinned:
        pinned["micro_batch_tokens"] = int(micro)
    backend = str(lookup(cfg, "backend.name", "torch") or "torch")
    implied_tp = backend != "vllm" and pinned.get("engine_tp") is None
    if implied_tp:
        pinned["engine_tp"] = 1  # only vLLM engines split over devices (tensor_parallel_size)
    now, priced, probe_note = _coefficients_now(cfg, hw, count)
    coef = None
    if now is not None:
        hw, coef = now
    wl = workload_from_config(cfg, prompt_tokens)
    try:
        result = make_plan(
            spec,
            hw,
            count,
            wl,
            lora_rank=lora,
            pinned=pinned,
            coefficients=coef,
        )
    except NoPlanFits as exc:
        if not implied_tp:
            raise
        why = str(exc).splitlines()[0]
        raise NoPlanFits(
            f"backend.name={backend}: its generation engines have no tensor parallelism, so the "
            f"plan keeps engine_tp=1 (backend=vllm plans engine TP). {why[:1].upper()}{why[1:]}",
            exc.nearest,
            exc.suggestions,
            exc.fixes,
        ) from exc
    if now is not None:
        result.priced_at_load = priced["load_average"]
        result.priced_at_speed = {k: round(priced[k], 3) for k in ("learn", "decode", "share")}
        result.notes.append(probe_note)
    if wl.group_size > 1:
        result.refill = _refill_prices(cfg, spec, hw, result, wl, coef)
    if backend == "torch" and lookup(cfg, "backend.decode_dtype", None) == "bfloat16":
        result.notes.append(
            "backend.decode_dtype=bfloat16: generation priced as the fp32 decode, an upper bound "
            "(SmolLM2 at batch 8 decoded in 0.5-0.67x the fp32 time, bench/plan_accuracy.py); the "
            "engine's memory holds its bf16 copy of the linears"
            + (" and the decode step's oneDNN-packed twin" if bf16_copy_bytes() > 2 else "")
        )
    if prompt_tokens and lookup(cfg, "env.max_prompt_tokens", None) is None:
        result.notes.append(
            f"prompt length: {prompt_tokens} tokens, the mean of the env's own prompts rendered "
            "with the model's chat template (env.max_prompt_tokens pins it)"
        )
    return result


def _refill_prices(
    cfg: dict[str, Any],
    spec: ModelSpec,
    hw: HardwareProfile,
    result: PlanResult,
    wl: Workload,
    coef: Any,
) -> dict[str, Any]:
    """What a refill round costs (`arena_core.planner.refill`): the run re-prices its step with
    these once it has seen how many of its groups are flat."""
    from arena_core.planner.coefficients import coefficients_for
    from arena_core.planner.refill import round_prices

    return round_prices(
        spec,
        hw,
        result.plan,
        wl,
        coef if coef is not None else coefficients_for(hw),
        max_rounds=int(lookup(cfg, "train.max_sampling_rounds", 4) or 1),
        max_flat_rounds=int(lookup(cfg, "train.max_flat_rounds", 2) or 0),
    )


def _coefficients_now(
    cfg: dict[str, Any], hw: HardwareProfile, count: int
) -> tuple[tuple[HardwareProfile, Any] | None, dict[str, Any] | None, str]:
    """The local CPU priced at the share of a core its torch threads get now
    (``arena_core.planner.live``), with what was measured and a note for the plan; (None, None,
    "") for other hardware, a split CPU, or ``ARENA_PLAN_PROBE=0``."""
    from arena_core.planner import live

    if hw.kind != "cpu" or hw.name != "cpu" or count != 1 or not live.probe_enabled():
        return None, None, ""
    from arena_core.planner import machine_rates
    from arena_core.planner.coefficients import coefficients_for, load_calibration

    coef = coefficients_for(hw)
    machine_note = ""
    if load_calibration(hw.name) is None:  # shipped efficiencies on this machine's own rates
        rates, probed = machine_rates.machine_rates()
        hw, coef = machine_rates.on_this_machine(hw, coef, rates)
        machine_note = (
            f"; this machine's rates ({'probed now' if probed else 'probed once'}, "
            f"{machine_rates.rates_path()}): matmul {rates['matmul_tflops'] * 1e3:.3g} GFLOP/s, "
            f"decode read {rates['decode_read_gbs']:.3g} GB/s ('arena plan --calibrate' fits "
            "all coefficients here)"
        )
    threads = int(lookup(cfg, "runtime.threads", None) or hw.cores or 1)
    now = live.share_now(threads)
    rates = live.rates_now(hw, now)
    pair = live.at_current_rates(hw, coef, rates)
    how = (
        f"{live.SHARE_ENV}={now['share']:g}"
        if now["how"] == "pinned"
        else f"measured now for {live.PROBE_SECONDS:g} s against one idle thread"
    )
    note = (
        f"priced at the CPU this run gets now: its {threads} torch thread(s) run learning at "
        f"{now['learn']:.0%} and decoding at {now['decode']:.0%} of one idle thread's speed, its "
        f"Python thread gets {now['share']:.0%} of a core ({how}; {now['usable_cpus']:g} usable "
        f"CPUs, load average {now['load_average']:.1f}), so matmul "
        f"{rates['matmul_tflops'] * 1e3:.3g} of {hw.bf16_tflops * 1e3:.3g} GFLOP/s; "
        f"{live.PROBE_ENV}=0 plans on the idle machine's rates{machine_note}"
    )
    return pair, now, note
