"""Rich rendering of a PlanResult: the plan, memory per device, step time, and the runners-up."""

from __future__ import annotations

from typing import Any

from arena_core.planner.plan import GB, Candidate, PlanResult


def render_result(result: PlanResult, console: Any = None) -> None:
    """Print the chosen plan and a table of the best rejected alternatives."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    plan, pred = result.plan, result.prediction
    w = result.workload
    console.print(f"[bold]Model[/bold]     {result.model_summary}")
    console.print(f"[bold]Hardware[/bold]  {result.count} x {result.hardware_name}")
    console.print(
        f"[bold]Workload[/bold]  {w.prompts_per_step} prompts x {w.group_size} "
        f"completions, {w.prompt_tokens} prompt + {w.completion_tokens} new tokens"
        f"{', reference model' if w.kl_ref else ''}"
        f"{f', LoRA r={plan.lora_rank}' if plan.lora_rank else ', full fine-tuning'}"
    )
    if result.pinned:
        console.print(
            "[bold]Pinned[/bold]    " + ", ".join(f"{k}={v}" for k, v in result.pinned.items())
        )
    console.print(f"[bold green]Plan[/bold green]      {plan.describe()}")

    mem = Table(title="Predicted memory per device (GB)", show_edge=False)
    mem.add_column("side")
    keys = list(pred.trainer_memory) + [
        k for k in pred.engine_memory if k not in pred.trainer_memory
    ]
    for key in keys:
        mem.add_column(key, justify="right")
    mem.add_column("total", justify="right")
    mem.add_column("usable", justify="right")
    for side, parts in (("trainer", pred.trainer_memory), ("engine", pred.engine_memory)):
        mem.add_row(
            side,
            *[_g(parts[k]) if k in parts else "" for k in keys],
            _g(sum(parts.values())),
            _g(pred.usable_bytes),
        )
    console.print(mem)
    if pred.shared_device:
        console.print(
            f"  colocated: both sides share each device, {_g(pred.peak_bytes)} GB together"
        )

    idle = pred.idle_fraction()
    console.print(
        f"[bold]Step time[/bold] {pred.total_s:.3g} s = "
        + (
            f"max(generate {pred.generate_s:.3g}, learn {pred.learn_s:.3g}) + sync "
            f"{pred.sync_s:.3g}"
            if plan.colocate == "none"
            else f"generate {pred.generate_s:.3g} + learn {pred.learn_s:.3g} + sync {pred.sync_s:.3g}"
        )
        + (
            f"   idle: trainer {idle['trainer']:.0%}, engine {idle['engine']:.0%}"
            if plan.colocate == "none"
            else ""
        )
    )
    for note in result.notes:
        console.print(f"[yellow]note[/yellow] {note}")
    if result.alternatives:
        console.print(_alternatives_table(result.alternatives))
    console.print(f"[dim]planned in {result.elapsed_s:.2f} s[/dim]")


def _alternatives_table(alts: list[Candidate]) -> Any:
    from rich.table import Table

    table = Table(title="Best rejected alternatives", show_edge=False)
    for col in ("plan", "trainer GB", "engine GB", "step s", "why it lost"):
        table.add_column(col, justify="left" if col in ("plan", "why it lost") else "right")
    for alt in alts:
        p = alt.prediction
        table.add_row(
            alt.plan.describe(),
            _g(p.trainer_bytes),
            _g(p.engine_bytes),
            f"{p.total_s:.3g}",
            alt.reason,
        )
    return table


def _g(x: float) -> str:
    return f"{x / GB:.1f}" if x >= 0.05 * GB else f"{x / GB:.2f}"
