"""Progress display: a rich bar on a terminal, plain log lines when stdout is a pipe or a file.

A bar redrawn into a log file is noise, so the mode is chosen from `sys.stdout.isatty()` unless
`runtime.progress` pins it.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any


def _fmt_eta(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """`update(step, metrics)` after each step; `close()` at the end. Context manager."""

    def __init__(self, total: int, *, start: int = 0, mode: str = "auto", every: int = 1) -> None:
        self.total, self.start, self.every = total, start, max(1, every)
        if mode == "auto":
            mode = "bar" if sys.stdout.isatty() else "lines"
        self.mode = mode
        self._t0 = time.perf_counter()
        self._bar: Any = None
        if mode == "bar":
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]step"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self._task = self._bar.add_task("train", total=total, completed=start, info="")
            self._bar.start()

    def update(self, step: int, metrics: dict[str, Any]) -> None:
        reward = metrics.get("reward/mean")
        tps = metrics.get("tokens_per_s/generated")
        info = (f"reward {reward:.3f}" if isinstance(reward, float) else "reward -") + (
            f"  {tps:,.0f} tok/s" if isinstance(tps, float) else ""
        )
        if self.mode == "bar":
            self._bar.update(self._task, completed=step, info=info)
        elif self.mode == "lines" and (step % self.every == 0 or step == self.total):
            done = step - self.start
            elapsed = time.perf_counter() - self._t0
            eta = elapsed / done * (self.total - step) if done else 0.0
            loss = metrics.get("loss")
            extra = f"  loss {loss:.4f}" if isinstance(loss, float) else ""
            if isinstance(loss, float) and math.isnan(loss) and metrics.get("train/flat_step"):
                extra = "  loss -  (flat: no update)"  # not a failure: nothing to learn from
            print(f"step {step}/{self.total}  {info}{extra}  ETA {_fmt_eta(eta)}", flush=True)

    def note(self, text: str) -> None:
        """A message that must not be overwritten by the bar."""
        if self.mode == "bar":
            self._bar.console.print(text)
        elif self.mode == "lines":
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
