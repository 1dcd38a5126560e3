"""The arguments MCP validation makes up fit the tool's JSON Schema: checked with `jsonschema`
(the validator the `mcp` SDK depends on) and by a real SDK server, whose own Pydantic validation
refuses arguments that do not fit (its tools would answer errors)."""

from __future__ import annotations

import argparse
import datetime
import json
import random
import re
import sys
import textwrap
import uuid
from urllib.parse import urlparse

import pytest
from jsonschema import FormatChecker
from jsonschema.validators import validator_for

from arena_core.cli import cmd_validate
from arena_core.validate.mcp_schema import example_arguments

pytest.importorskip("mcp.server.mcpserver")


def _obj(**props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props)}


SCHEMAS = {
    "minLength": _obj(s={"type": "string", "minLength": 12}),
    "minLength and maxLength": _obj(s={"type": "string", "minLength": 3, "maxLength": 3}),
    "exclusive bounds": _obj(x={"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
    "integer exclusiveMaximum": _obj(n={"type": "integer", "minimum": 4, "exclusiveMaximum": 5}),
    "draft 4 exclusive flags": {
        "$schema": "http://json-schema.org/draft-04/schema#",
        **_obj(
            n={
                "type": "integer",
                "minimum": 0,
                "maximum": 2,
                "exclusiveMinimum": True,
                "exclusiveMaximum": True,
            }  # fmt: skip
        ),
    },
    "fractional range": _obj(x={"type": "number", "minimum": 0.1, "maximum": 0.2}),
    "multipleOf": _obj(x={"type": "number", "multipleOf": 0.25, "minimum": 1, "maximum": 2}),
    "pattern": _obj(code={"type": "string", "pattern": r"^[A-Z]{3}-\d{4}$"}),
    "pattern with minLength": _obj(w={"type": "string", "pattern": "^[a-z]+$", "minLength": 10}),
    "pattern unanchored": _obj(w={"type": "string", "pattern": "(foo|bar)[0-9]+"}),
    "formats": _obj(
        email={"type": "string", "format": "email"},
        uri={"type": "string", "format": "uri"},
        date={"type": "string", "format": "date"},
        when={"type": "string", "format": "date-time"},
        id={"type": "string", "format": "uuid"},
    ),
    "$ref and $defs": {
        "type": "object",
        "$defs": {
            "Item": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 3},
                    "tag": {"$ref": "#/$defs/Tag"},
                },
                "required": ["n", "tag"],
            },
            "Tag": {"type": "string", "enum": ["red", "blue"]},
        },
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 2}
        },
        "required": ["items"],
    },
    "nullable anyOf": _obj(v={"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 7}]}),
    "unique items": _obj(
        xs={"type": "array", "items": {"type": "integer"}, "minItems": 3, "uniqueItems": True}
    ),
}


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_generated_arguments_fit_the_schema(name: str) -> None:
    schema = SCHEMAS[name]
    validator = validator_for(schema)(schema, format_checker=FormatChecker())
    for seed in range(5):
        args = example_arguments(schema, random.Random(seed))
        errors = [e.message for e in validator.iter_errors(args)]
        assert not errors, (name, args, errors)


def test_formats_are_real_values() -> None:
    args = example_arguments(SCHEMAS["formats"], random.Random(0))
    assert re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]+", args["email"])
    assert urlparse(args["uri"]).scheme and urlparse(args["uri"]).netloc
    datetime.date.fromisoformat(args["date"])
    datetime.datetime.fromisoformat(args["when"].replace("Z", "+00:00"))
    uuid.UUID(args["id"])


SERVER = textwrap.dedent(
    '''
    from typing import Annotated, Literal

    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations
    from pydantic import BaseModel, Field

    server = MCPServer("constrained")
    READ = ToolAnnotations(read_only_hint=True)


    class Item(BaseModel):
        sku: Annotated[str, Field(pattern=r"^[A-Z]{2}\\d{3}$")]
        qty: Annotated[int, Field(gt=0, lt=10)]
        kind: Literal["a", "b"]


    @server.tool(annotations=READ)
    def price(items: Annotated[list[Item], Field(min_length=1)]) -> str:
        """Price a basket."""
        return str(sum(i.qty for i in items))


    @server.tool(annotations=READ)
    def lookup(
        name: Annotated[str, Field(min_length=6, max_length=12)],
        ratio: Annotated[float, Field(gt=0.0, lt=0.5)],
    ) -> str:
        """Look a name up."""
        return f"{name} {ratio}"


    server.run()
    '''
)


def test_a_real_sdk_server_accepts_every_generated_call(
    capsys, tmp_path, no_leftover_children
) -> None:
    path = tmp_path / "constrained.py"
    path.write_text(SERVER)
    parser = argparse.ArgumentParser(prog="arena")
    cmd_validate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["validate", "env", "--mcp-command", f"{sys.executable} {path}", "--json"]
    )
    code = args.func(args)
    report = json.loads(capsys.readouterr().out)
    calls = next(c for c in report["checks"] if c["name"] == "calls")
    assert code == 0 and calls["status"] == "PASS", calls
    assert calls["detail"] == "2 tool(s) answered generated arguments", calls  # no error result
