"""Python functions as tools: schemas from signatures, and no bad call ever raises."""

from __future__ import annotations

import time

from arena_core.tools.python_session import PythonToolSession, schema_of


def lookup(key: str, default: int = 0) -> str:
    """Look a key up in the store.

    Longer text that is not part of the description.
    """
    return f"{key}={default}"


def broken(x: int) -> str:
    """Always fails."""
    raise RuntimeError("disk on fire")


def slow(x: int) -> str:
    """Sleeps."""
    time.sleep(2)
    return "late"


def test_schema_is_derived_from_the_signature() -> None:
    fn = schema_of(lookup)["function"]
    assert fn["name"] == "lookup" and fn["description"] == "Look a key up in the store."
    assert fn["parameters"] == {
        "type": "object",
        "properties": {"key": {"type": "string"}, "default": {"type": "integer"}},
        "required": ["key"],
    }


def test_calls_and_errors() -> None:
    state: dict = {"writes": 0}
    s = PythonToolSession([lookup, broken, slow], state=state)
    assert [t["function"]["name"] for t in s.tools()] == ["lookup", "broken", "slow"]
    ok = s.call("lookup", {"key": "k", "default": 3}, timeout_s=1.0)
    assert ok.text == "k=3" and not ok.is_error
    for name, args, words in [
        ("nope", {}, "unknown tool 'nope'. Available tools: lookup, broken, slow"),
        ("lookup", {"default": 1}, "missing required argument 'key'"),
        ("lookup", {"key": 1}, "argument 'key' must be string, got int"),
        ("lookup", {"key": "k", "zzz": 1}, "unknown argument 'zzz'"),
        ("broken", {"x": 1}, "Error: disk on fire"),
    ]:
        result = s.call(name, args, timeout_s=1.0)
        assert result.is_error and words in result.text, result
    t0 = time.perf_counter()
    late = s.call("slow", {"x": 1}, timeout_s=0.1)
    assert late.is_error and "timed out after 0.1s" in late.text
    assert time.perf_counter() - t0 < 1.0
    state["writes"] = 1
    assert s.final_state() == {"writes": 1}
