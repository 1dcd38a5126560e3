"""Reward for countdown: 1.0 when the <answer> expression uses only the given numbers (each at most
once) and equals the target; 0.1 for a well-formed expression that misses; else 0.0.

A reward file in Arena's contract, standard library only: Arena runs it in a sandboxed child.
"""

from __future__ import annotations

import ast
import re
from collections import Counter

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_QUESTION = re.compile(r"Numbers: ([\d ]+)\. Target: (-?\d+)\.")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


def _value(node: ast.AST, used: list[int]) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left, used), _value(node.right, used))
    raise ValueError("only integers and + - * are allowed")


def reward(question: str, answer: str, completion: str) -> float:
    found, given = _ANSWER.findall(completion[-2000:]), _QUESTION.search(question)
    if not found or not given or len(found[-1]) > 200:
        return 0.0
    used: list[int] = []
    try:
        value = _value(ast.parse(found[-1].strip(), mode="eval").body, used)
    except (SyntaxError, ValueError, RecursionError):
        return 0.0
    if Counter(used) - Counter(int(n) for n in given.group(1).split()):
        return 0.0  # a number that was not given, or one used twice
    return 1.0 if value == int(given.group(2)) else 0.1
