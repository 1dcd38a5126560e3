"""Tool input schemas for MCP validation: is it valid JSON Schema, and arguments made from it.

`schema_problem` uses `jsonschema` (a dependency of the `mcp` SDK, so present wherever MCP envs
run). `example_arguments` builds arguments that satisfy a schema (enum values, numbers within
bounds, strings of the right length, pattern and format, `$ref`s followed, required keys
filled): a made-up call a server refuses teaches validation nothing; `wrong_arguments` builds calls a server must refuse
(required keys missing, a value of the wrong JSON type), so validation can check that the server
answers them with an error result instead of hanging or dying.
"""

from __future__ import annotations

import math
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


_FORMATS = {
    "email": "arena@example.com",
    "idn-email": "arena@example.com",
    "uri": "https://example.com/arena",
    "iri": "https://example.com/arena",
    "uri-reference": "https://example.com/arena",
    "url": "https://example.com/arena",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "date": "2024-01-31",
    "time": "12:00:00Z",
    "date-time": "2024-01-31T12:00:00Z",
    "duration": "P1D",
    "uuid": "123e4567-e89b-42d3-a456-426614174000",
    "json-pointer": "/arena",
    "regex": "^arena$",
}
_WORD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"


def _resolve(schema: Any, root: dict[str, Any], depth: int) -> Any:
    """`schema` with a local `$ref` (`#/$defs/Item`, `#/definitions/Item`) followed, its
    sibling keywords kept, and `allOf` parts merged (what a tool's Pydantic schema uses)."""
    for _ in range(8):
        if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
            break
        ref = schema["$ref"]
        target: Any = root
        if not ref.startswith("#"):
            break
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**(target if isinstance(target, dict) else {}), **rest}
    if isinstance(schema, dict) and isinstance(schema.get("allOf"), list) and depth < 6:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            part = _resolve(part, root, depth + 1)
            if isinstance(part, dict):
                props = {**(merged.get("properties") or {}), **(part.get("properties") or {})}
                required = [*merged.get("required", []), *part.get("required", [])]
                merged = {**part, **merged, "properties": props, "required": required}
        schema = merged
    return schema


def example_value(
    schema: Any, rng: random.Random, depth: int = 0, root: dict[str, Any] | None = None
) -> Any:
    """A value that satisfies `schema`: enums and consts, local `$ref`/`$defs`, `allOf`, string
    length, `pattern` and `format`, numeric bounds (exclusive ones and fractional ranges
    included), `multipleOf`, array sizes and nested objects."""
    root = root if root is not None else (schema if isinstance(schema, dict) else {})
    schema = _resolve(schema, root, depth)
    if not isinstance(schema, dict) or depth > 6:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            options = [_resolve(o, root, depth + 1) for o in schema[key]]
            useful = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return example_value((useful or options)[0], rng, depth + 1, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        required = [k for k in schema.get("required", []) if isinstance(k, str)]
        return {k: example_value(props.get(k, {}), rng, depth + 1, root) for k in required}
    if kind == "array" or (kind is None and "items" in schema):
        return _array(schema, rng, depth, root)
    if kind in ("integer", "number"):
        return _number(schema, rng, integer=kind == "integer")
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(schema, rng)


def _array(schema: dict[str, Any], rng: random.Random, depth: int, root: dict) -> list[Any]:
    count = max(1, int(schema.get("minItems", 1)))
    if "maxItems" in schema:
        count = min(count, int(schema["maxItems"]))
    prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
    items = schema.get("items", {})
    if isinstance(items, list):  # draft 4-7 tuple form
        prefix, items = items, schema.get("additionalItems", {})
    out = [example_value(p, rng, depth + 1, root) for p in prefix[:count]]
    while len(out) < count:
        value = example_value(items, rng, depth + 1, root)
        if schema.get("uniqueItems") and value in out:
            if isinstance(value, int | float) and not isinstance(value, bool):
                value = value + len(out)
            elif isinstance(value, str):
                value = f"{value}{len(out)}"
        out.append(value)
    return out


def _number(schema: dict[str, Any], rng: random.Random, *, integer: bool) -> int | float:
    """Inside [minimum, maximum] and (exclusiveMinimum, exclusiveMaximum), draft 6+ numbers or
    draft 4 booleans; a multiple of `multipleOf`; fractional for a narrow `number` range."""
    low, high = schema.get("minimum"), schema.get("maximum")
    low_open = high_open = False
    ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if isinstance(ex_low, bool):  # draft 4
        low_open = ex_low
    elif isinstance(ex_low, int | float) and (low is None or ex_low >= low):
        low, low_open = ex_low, True
    if isinstance(ex_high, bool):
        high_open = ex_high
    elif isinstance(ex_high, int | float) and (high is None or ex_high <= high):
        high, high_open = ex_high, True
    if low is None and high is None:
        low, high = 0, 9
    elif low is None:
        low = high - 9
    elif high is None:
        high = low + 9
    step = schema.get("multipleOf")
    if integer or (isinstance(step, int) and not isinstance(step, bool)):
        unit = int(step) if isinstance(step, int | float) and step >= 1 else 1
        first = math.floor(low / unit) + 1 if low_open else math.ceil(low / unit)
        last = math.ceil(high / unit) - 1 if high_open else math.floor(high / unit)
        if first <= last:
            return rng.randint(first, last) * unit
        return int(low)  # an empty range: the schema cannot be met, the check says so
    if isinstance(step, float) and step > 0:
        first = math.floor(low / step) + 1 if low_open else math.ceil(low / step)
        last = math.ceil(high / step) - 1 if high_open else math.floor(high / step)
        return round(rng.randint(first, max(first, last)) * step, 12)
    span = high - low
    if span <= 0:
        return float(low)
    value = low + span * rng.uniform(0.25, 0.75)  # strictly inside: open ends are kept
    return float(value)


def _string(schema: dict[str, Any], rng: random.Random) -> str:
    low = max(int(schema.get("minLength", 1)), 0)
    pattern = schema.get("pattern")
    high = int(schema.get("maxLength", max(64 if pattern else 8, low)))
    fmt = schema.get("format")
    if isinstance(pattern, str):
        text = pattern_example(pattern, rng, low, high)
        if text is not None:
            return text
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    text = "arena" * (max(low, 1) // 5 + 1)
    return text[: max(low, min(len(text), high))] if high >= low else text[:low]


def pattern_example(
    pattern: str, rng: random.Random, min_length: int = 0, max_length: int = 64
) -> str | None:
    """A string `re.search(pattern, s)` matches, within the length bounds when it can be;
    None when the pattern uses what this does not generate (lookarounds, backreferences)."""
    import re

    try:
        import re._parser as sre_parse  # type: ignore[import-not-found]
    except ImportError:  # Python < 3.11
        import sre_parse  # type: ignore[no-redef]
    try:
        parsed = sre_parse.parse(pattern)
    except re.error:
        return None
    for attempt in range(24):  # later attempts repeat more: room for a minLength
        try:
            text = _generate(list(parsed), rng, attempt)
        except _Unsupported:
            return None
        if re.search(pattern, text) and min_length <= len(text) <= max(max_length, min_length):
            return text
    return None


class _Unsupported(Exception):
    pass


def _generate(items: list, rng: random.Random, attempt: int) -> str:
    """Text for a parsed regex (re's own parser): literals, classes, repeats, groups and
    alternatives; anything else raises _Unsupported."""
    out = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append(next(ch for ch in _WORD if ord(ch) != arg))
        elif name == "ANY":
            out.append(rng.choice(_WORD[:26]))
        elif name == "IN":
            out.append(_one_of(arg, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            if attempt < 12:  # random counts, growing
                count = rng.randint(low, min(high, low + 1 + attempt))
            else:  # every length in turn: one of them meets minLength/maxLength
                count = min(high, low + attempt - 12)
            out.extend(_generate(list(sub), rng, attempt) for _ in range(count))
        elif name == "SUBPATTERN":
            out.append(_generate(list(arg[-1]), rng, attempt))
        elif name == "ATOMIC_GROUP":
            out.append(_generate(list(arg), rng, attempt))
        elif name == "BRANCH":
            out.append(_generate(list(rng.choice(arg[1])), rng, attempt))
        elif name == "AT":
            continue  # anchors and word boundaries: the text is built whole
        else:  # lookarounds, backreferences, conditionals
            raise _Unsupported(name)
    return "".join(out)


def _one_of(items: list, rng: random.Random) -> str:
    """A character a `[...]` class accepts."""
    categories = {
        "CATEGORY_DIGIT": "0123456789",
        "CATEGORY_NOT_DIGIT": "abcxyz",
        "CATEGORY_WORD": _WORD,
        "CATEGORY_NOT_WORD": "-. ",
        "CATEGORY_SPACE": " ",
        "CATEGORY_NOT_SPACE": "abc",
    }
    negate = bool(items) and str(items[0][0]) == "NEGATE"
    allowed: list[str] = []
    for op, arg in items[1:] if negate else items:
        name = str(op)
        if name == "LITERAL":
            allowed.append(chr(arg))
        elif name == "RANGE":
            allowed.extend(chr(i) for i in range(arg[0], min(arg[1], arg[0] + 95) + 1))
        elif name == "CATEGORY":
            allowed.extend(categories.get(str(arg), "a"))
    if negate:
        pool = [ch for ch in _WORD + "-. " if ch not in allowed]
        return rng.choice(pool) if pool else "~"
    return rng.choice(allowed) if allowed else "a"


def example_arguments(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Arguments for a tool call generated from its input schema."""
    value = example_value({**schema, "type": "object"}, rng, root=schema)
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
