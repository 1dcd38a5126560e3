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

    # one row per memory part, one column per side: stays narrow however many parts there are
    mem = Table(title="Predicted memory per device (GB)", show_edge=False)
    mem.add_column("part")
    mem.add_column("trainer", justify="right")
    mem.add_column("engine", justify="right")
    keys = list(pred.trainer_memory) + [
        k for k in pred.engine_memory if k not in pred.trainer_memory
    ]
    for key in keys:
        mem.add_row(
            key.replace("_", " "),
            _g(pred.trainer_memory[key]) if key in pred.trainer_memory else "",
            _g(pred.engine_memory[key]) if key in pred.engine_memory else "",
        )
    mem.add_row(
        "[bold]total[/bold]",
        _g(sum(pred.trainer_memory.values())),
        _g(sum(pred.engine_memory.values())),
    )
    mem.add_row("usable", _g(pred.usable_bytes), _g(pred.usable_bytes))
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
    console.print(f"[bold]Times[/bold]     {result.calibration_label}")
    for note in result.notes:
        console.print(f"[yellow]note[/yellow] {note}")
    if result.alternatives:
        _print_alternatives(console, result.alternatives)
    console.print(f"[dim]planned in {result.elapsed_s:.2f} s[/dim]")


def _print_alternatives(console: Any, alts: list[Candidate]) -> None:
    """A numbered list, not a 5-column table: a plan's description and the reason it lost are
    sentences, which such a table wrapped into one-word lines at 80 columns."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    for i, alt in enumerate(alts, 1):
        p = alt.prediction
        grid.add_row(
            f"{i}.",
            f"{alt.plan.describe()}\n[dim]trainer {_g(p.trainer_bytes)} GB, engine "
            f"{_g(p.engine_bytes)} GB, step {p.total_s:.3g} s:[/dim] {alt.reason}",
        )
    console.print("[bold]Best rejected alternatives[/bold]")
    console.print(grid, highlight=False)


def _g(x: float) -> str:
    return f"{x / GB:.1f}" if x >= 0.05 * GB else f"{x / GB:.2f}"
