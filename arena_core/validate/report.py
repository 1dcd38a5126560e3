"""The report every validator returns: named checks with a status and a detail, and a verdict.

One shape for rewards, environments, datasets and configs, so the CLI, `arena-run` and the SDK
print, serialise and decide (exit code, stop before loading a model) the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
_STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red", SKIP: "dim"}


@dataclass
class Check:
    """One check: `name` (stable, for --json consumers), `status`, and a `detail` that says what
    was seen and, when not PASS, what to change."""

    name: str
    status: str
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": self.status, "detail": self.detail}
        if self.data:
            out["data"] = self.data
        return out


@dataclass
class Report:
    """The checks of one validation; `verdict` is FAIL if any check failed, else WARN if any
    warned, else PASS. `info` holds facts that are not checks (timings, paths, kind)."""

    subject: str
    kind: str
    checks: list[Check] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    fail_exit_code: int = 1  # 2 for a config that does not compose or validate (like arena-run)

    def add(self, name: str, status: str, detail: str = "", **data: Any) -> Check:
        check = Check(name, status, detail, dict(data))
        self.checks.append(check)
        return check

    @property
    def verdict(self) -> str:
        statuses = {c.status for c in self.checks}
        if FAIL in statuses:
            return FAIL
        return WARN if WARN in statuses else PASS

    @property
    def ok(self) -> bool:
        """True for PASS and WARN: what `arena validate` exits 0 on and `arena-run` proceeds on."""
        return self.verdict != FAIL

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else self.fail_exit_code

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "verdict": self.verdict,
            "checks": [c.to_dict() for c in self.checks],
            "info": self.info,
        }

    def summary(self) -> str:
        """Plain text: the verdict line, then one line per non-passing check (for errors/logs)."""
        lines = [f"{self.kind} {self.subject}: {self.verdict}"]
        for c in self.checks:
            if c.status in (FAIL, WARN):
                lines.append(f"  {c.status} {c.name}: {c.detail}")
        return "\n".join(lines)

    def __rich__(self) -> Any:
        return render(self)


def render(report: Report) -> Any:
    """A rich renderable: the checks as a table and the verdict underneath."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{report.kind}: {report.subject}", title_justify="left", expand=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in report.checks:
        table.add_row(c.name, Text(c.status, style=_STYLE.get(c.status, "")), c.detail)
    verdict = Text(f"Verdict: {report.verdict}", style=_STYLE[report.verdict])
    return Group(table, verdict)
