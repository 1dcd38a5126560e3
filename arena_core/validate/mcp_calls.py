"""Which tools MCP validation calls, and against which state: validation must never change
what the user owns (a filesystem server's folder, a git repository, a memory file).

Only tools annotated `readOnlyHint: true` are called by default. A tool without annotations
counts as possibly destructive, as the MCP spec's defaults say (readOnlyHint false,
destructiveHint true); such tools are listed and their schemas checked, not called. The user
opts in (`--call-tools all`, `env.preflight_call_tools: all`), is told first which tools will be
called, and the calls then run against the check's own state directory when the episode state
gives the server one (fresh: started with it; reset: the reset tool given it first; tagged:
named in each call's `_meta`).
"""

from __future__ import annotations

from typing import Any

from arena_core.validate.report import FAIL, SKIP, Report

CALL_TOOLS = ("read_only", "all", "none")


def tool_hint(tool: dict[str, Any]) -> str:
    """What a tool's MCP annotations say it does: "read-only", "destructive", "writes" (not
    read-only, declared non-destructive) or "unannotated" (the spec's defaults: may destroy)."""
    notes = tool.get("annotations") or {}
    if not isinstance(notes, dict) or not notes:
        return "unannotated"
    if notes.get("readOnlyHint") is True:
        return "read-only"
    return "writes" if notes.get("destructiveHint") is False else "destructive"


def select_tools(
    tools: list[dict[str, Any]], schemas: dict[str, Any], call_tools: str, reset_tool: str
) -> tuple[list[str], dict[str, str]]:
    """(tools to call, {tool: why it is not called}) under the `call_tools` policy."""
    chosen, skipped = [], {}
    for tool in tools:
        name = str(tool.get("name"))
        if name == reset_tool or name not in schemas:
            continue
        hint = tool_hint(tool)
        if call_tools == "all" or (call_tools == "read_only" and hint == "read-only"):
            chosen.append(name)
        else:
            skipped[name] = hint
    return chosen, skipped


def announcement(chosen: list[str], resolved: str, state_dir: str, key: str) -> str:
    where = {
        "fresh": f"a server started for the check with its own state directory {state_dir} "
        "({state_dir} in its command, $ARENA_MCP_STATE_DIR)",
        "reset": f"the check's own state directory {state_dir}, given to the reset tool first",
        "tagged": f"the check's own state directory {state_dir}, named in each call's _meta",
    }.get(
        resolved,
        "the server's own state (episode_state=shared: no state directory of the check's own; "
        "episode_state=fresh or reset would give the calls one)",
    )
    return (
        f"{key}=all: calling {len(chosen)} tool(s) with generated arguments, read-only or not: "
        f"{', '.join(chosen)}. They act on {where}; a server that ignores the state directory "
        "changes what it always manages."
    )


def enter_state(report: Report, conn: Any, resolved: str, reset_tool: str, state_dir: str,
                 timeout_s: float) -> Any:  # fmt: skip
    """Point the check's server at its own state directory before calls that may write: the
    `_meta` every call carries (tagged), after the reset tool was called (reset); False when the
    reset failed (then a FAIL says why and nothing is called)."""
    from arena_core.tools.mcp_client import ServerGone
    from arena_core.tools.mcp_session import STATE_META_KEY

    if resolved == "tagged":
        return {STATE_META_KEY: state_dir}
    if resolved != "reset":
        return None
    try:
        result = conn.call(reset_tool, {"state_dir": state_dir}, timeout_s)
    except ServerGone as exc:
        result = None
        why = str(exc)
    else:
        why = result.text[:200]
    if result is None or result.is_error:
        report.add(
            "calls",
            FAIL,
            f'not run: `{reset_tool}({{"state_dir": ...}})` failed ({why}), so the calls '
            "would act on the server's own state; fix the reset tool or use episode_state=fresh",
        )
        report.add("wrong_calls", SKIP, "not run: the reset tool failed")
        return False
    return None


def not_called(skipped: dict[str, str], key: str) -> str:
    if not skipped:
        return ""
    shown = ", ".join(f"{n} ({h})" for n, h in skipped.items())
    return (
        f"not called, as they may change what the server manages (only tools annotated "
        f"readOnlyHint: true are; unannotated ones may destroy, per the MCP spec), schemas "
        f"checked: {shown}. {key}=all calls them too"
    )
