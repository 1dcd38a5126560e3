"""Tool input schemas for MCP validation: is it valid JSON Schema, and arguments made from it.

`schema_problem` uses `jsonschema` (a dependency of the `mcp` SDK, so present wherever MCP envs
run). `example_arguments` builds arguments that satisfy a schema (the first enum value, numbers
within bounds, required keys filled); `wrong_arguments` builds calls a server must refuse
(required keys missing, a value of the wrong JSON type), so validation can check that the server
answers them with an error result instead of hanging or dying.
"""

from __future__ import annotations

import random
from typing import Any

_WRONG: dict[str, Any] = {
    "string": 12345,
    "number": "not a number",
    "integer": "not an integer",
    "boolean": "not a boolean",
    "object": "not an object",
    "array": "not an array",
}


def schema_problem(schema: Any) -> str:
    """Why `schema` is not a valid JSON Schema for tool arguments ("" when it is)."""
    if not isinstance(schema, dict):
        return f"inputSchema is a {type(schema).__name__}, not a JSON object"
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        return f"not valid JSON Schema at {where}: {exc.message}"
    if schema.get("type", "object") != "object":
        return f"type is {schema.get('type')!r}: MCP tool arguments are a JSON object"
    return ""


def arguments_problem(schema: dict[str, Any], arguments: Any) -> str:
    """Why `arguments` do not satisfy `schema` ("" when they do)."""
    from jsonschema.validators import validator_for

    errors = sorted(validator_for(schema)(schema).iter_errors(arguments), key=str)
    return errors[0].message if errors else ""


def example_value(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value that satisfies `schema` in the common cases (enums, bounds, nested objects)."""
    if not isinstance(schema, dict) or depth > 6:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example_value(schema[key][0], rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        required = [k for k in schema.get("required", []) if isinstance(k, str)]
        return {k: example_value(props.get(k, {}), rng, depth + 1) for k in required}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [example_value(schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        high = schema.get("maximum", schema.get("exclusiveMaximum", low + 9))
        low, high = int(low) + ("exclusiveMinimum" in schema), int(high)
        return rng.randint(min(low, high), max(low, high))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    length = max(int(schema.get("minLength", 1)), 1)
    text = "arena" * (length // 5 + 1)
    return text[: min(len(text), int(schema.get("maxLength", 8)))] or "a"


def example_arguments(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Arguments for a tool call generated from its input schema."""
    value = example_value({**schema, "type": "object"}, rng)
    return value if isinstance(value, dict) else {}


def wrong_arguments(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(what is wrong, arguments) pairs a server must refuse with an error result."""
    props = schema.get("properties") or {}
    required = [k for k in schema.get("required", []) if isinstance(k, str)]
    out: list[tuple[str, dict[str, Any]]] = []
    if required:
        out.append((f"required {', '.join(required)} missing", {}))
    rng = random.Random(0)
    base = example_arguments(schema, rng)
    for key, prop in props.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(kind, str) and kind in _WRONG:
            wrong = {**base, key: _WRONG[kind]}
            out.append((f"'{key}' given a value that is not {kind}", wrong))
            break
    return out
