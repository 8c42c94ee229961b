"""The coding environment (the paper's third setting): a problem with tests; the policy answers
with reasoning and one python block; the verifier runs the program on the tests in the sandbox.

- Two test styles. "stdio": the program reads a test's `stdin` and must print its `expected`
  text (compared line by line, trailing whitespace ignored). "function": the program defines
  `entry_point`; a test calls it with `args` and the returned value must equal `expected` (JSON
  values; floats within `tolerance`).
- The outcome is +1 if every test passes, else −1; the pass fraction is recorded beside it.
- One episode is one step. The step's ground-truth label (RM process accuracy) is its outcome.
- How a run is checked cannot be faked from inside: a harness of ours runs every test of a program
  in one sandboxed process and sends back only what the program printed or returned; expected
  values never enter the sandbox, and the comparison happens here. A program that exits early
  (`sys.exit`, `os._exit`), patches the harness, or returns an object that claims equality with
  everything has its tests fail.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlanything_core.envs.common import Move, validate_spec
from rlanything_core.sandbox import Isolation, Limits, Verdict, run_python

Style = Literal["stdio", "function"]
MAX_TESTS = 64
OUTPUT_CAP = 4096  # characters of a test's output sent back by the harness
RESULTS_MARKER = "@@rlanything-results@@"


class CodeTest(BaseModel):
    """One test: stdin → expected stdout ("stdio"), or args → expected value ("function")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stdin: str | None = None
    """stdio style: the program's standard input."""
    args: list[Any] | None = None
    """function style: positional arguments of the call (JSON values)."""
    expected: Any
    """stdio: the expected standard output (text); function: the expected return value."""
    tolerance: float = Field(0.0, ge=0.0)
    """function style: absolute tolerance for numbers (0 = exact)."""


class CodingSpec(BaseModel):
    """A coding task: the statement the policy sees and the tests that verify a program."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    problem: str = Field(min_length=1)
    """The problem statement shown to the policy."""
    style: Style
    """"stdio" (read standard input, print the answer) or "function" (define entry_point)."""
    entry_point: str | None = None
    """function style: the name of the function to define."""
    tests: list[CodeTest] = Field(min_length=1, max_length=MAX_TESTS)
    """Hidden tests; a program passes the task when it passes all of them."""
    time_limit_s: float = Field(2.0, gt=0.0, le=60.0)
    """Wall-clock seconds per test."""

    @model_validator(mode="after")
    def _tests_match_style(self) -> CodingSpec:
        if self.style == "function":
            if not self.entry_point or not self.entry_point.isidentifier():
                raise ValueError("function-style tasks need entry_point, a Python identifier")
            if any(t.args is None or t.stdin is not None for t in self.tests):
                raise ValueError("function-style tests need 'args' (a list) and no 'stdin'")
        else:
            if self.entry_point is not None:
                raise ValueError("stdio-style tasks take no entry_point")
            if any(t.stdin is None or t.args is not None for t in self.tests):
                raise ValueError("stdio-style tests need 'stdin' (text) and no 'args'")
            if any(not isinstance(t.expected, str) for t in self.tests):
                raise ValueError("stdio-style tests need 'expected' as text")
        return self

    def to_json(self) -> str:
        return json.dumps(self.model_dump(exclude_defaults=False), sort_keys=True)

    @property
    def goal_text(self) -> str:
        return self.problem


def parse_coding_spec(data: str | dict[str, object]) -> CodingSpec:
    """Validate a coding spec (JSON text or dict); SpecError names the field and the fix."""
    return validate_spec(CodingSpec, data, "coding")


_FENCE = re.compile(r"```[ \t]*(python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_program(text: str) -> str | None:
    """The last fenced code block (```python … ``` or a bare ``` … ```), or None."""
    blocks = _FENCE.findall(text)
    if not blocks:
        return None
    program = blocks[-1][1]
    return program if program.strip() else None


# The harness runs inside the sandbox beside solution.py. It reads the tests' inputs (never their
# expected values) on stdin, runs each test in a fresh namespace with the program's own stdout
# captured, and writes one results line to a duplicate of the original stdout taken before any
# program code ran.
HARNESS = r"""
import contextlib, copy, io, json, os, runpy, signal, sys
out = os.dup(1)
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, 1)
job = json.loads(sys.stdin.read())
here = os.path.dirname(os.path.abspath(__file__))
solution = os.path.join(here, "solution.py")
cap = job["output_cap"]

def alarm(signum, frame):
    raise TimeoutError("test time limit")

signal.signal(signal.SIGALRM, alarm)
results = []
for test in job["tests"]:
    buf = io.StringIO()
    result = {"ok": False}
    signal.setitimer(signal.ITIMER_REAL, job["per_test_s"])
    try:
        with contextlib.redirect_stdout(buf):
            if job["style"] == "stdio":
                sys.stdin = io.StringIO(test["stdin"])
                try:
                    runpy.run_path(solution, run_name="__main__")
                except SystemExit as exc:
                    if exc.code not in (None, 0):
                        raise
                result = {"ok": True, "out": buf.getvalue()[:cap]}
            else:
                fn = runpy.run_path(solution, run_name="solution")[job["entry_point"]]
                value = fn(*copy.deepcopy(test["args"]))
                result = {"ok": True, "value": json.dumps(value)[:cap]}
    except BaseException as exc:
        result = {"ok": False, "error": (type(exc).__name__ + ": " + str(exc))[:300]}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    results.append(result)
os.write(out, ("\n" + job["marker"] + json.dumps(results) + "\n").encode())
"""


@dataclass(frozen=True)
class TestReport:
    """The verdict on one program over a list of tests."""

    passed: list[bool]
    status: str
    """"no_program" when the answer held no code block; else the sandbox status of the run."""
    error: str | None
    """The first failure, in a few words (for the RM's observation and for people)."""
    isolation: str | None

    @property
    def pass_fraction(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.passed) and all(self.passed)


def same_stdout(got: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and trailing blank lines."""

    def norm(text: str) -> list[str]:
        lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    return norm(got) == norm(expected)


def same_value(got: Any, expected: Any, tolerance: float) -> bool:
    """JSON values equal, numbers within `tolerance`; bool is not a number here."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, int | float) and isinstance(got, int | float):
        if tolerance > 0 or isinstance(expected, float) or isinstance(got, float):
            return math.isclose(got, expected, rel_tol=0.0, abs_tol=max(tolerance, 1e-9))
        return got == expected
    if isinstance(expected, list) and isinstance(got, list):
        return len(got) == len(expected) and all(
            same_value(g, e, tolerance) for g, e in zip(got, expected, strict=True)
        )
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(
            same_value(got[k], expected[k], tolerance) for k in expected
        )
    return type(got) is type(expected) and bool(got == expected)


def _check_one(test: CodeTest, result: dict[str, Any], style: Style) -> tuple[bool, str | None]:
    if not result.get("ok"):
        return False, str(result.get("error", "no result"))
    if style == "stdio":
        ok = same_stdout(str(result.get("out", "")), str(test.expected))
        return ok, None if ok else f"wrong output {str(result.get('out', ''))[:60]!r}"
    try:
        value = json.loads(result.get("value", ""))
    except (TypeError, json.JSONDecodeError):
        return False, "the return value is not a JSON value"
    ok = same_value(value, test.expected, test.tolerance)
    return ok, None if ok else f"returned {json.dumps(value)[:60]}"


def run_tests(
    program: str | None,
    spec: CodingSpec,
    tests: Sequence[CodeTest] | None = None,
    *,
    isolation: Isolation | None = None,
    memory_mb: int = 1024,
) -> TestReport:
    """Run `program` on `tests` (default: the spec's own) in one sandbox; never raises for
    anything the program does."""
    tests = list(spec.tests if tests is None else tests)
    if program is None:
        return TestReport([False] * len(tests), "no_program", "no python code block", None)
    if not tests:
        return TestReport([], "ok", None, None)
    job = {
        "style": spec.style,
        "entry_point": spec.entry_point,
        "tests": [{"stdin": t.stdin, "args": t.args} for t in tests],
        "per_test_s": spec.time_limit_s,
        "output_cap": OUTPUT_CAP,
        "marker": RESULTS_MARKER,
    }
    limits = Limits(
        timeout_s=spec.time_limit_s * len(tests) + 2.0,
        cpu_s=math.ceil(spec.time_limit_s * len(tests)) + 1,
        memory_mb=memory_mb,
        output_bytes=(OUTPUT_CAP + 400) * len(tests) + 1024,
    )
    verdict = run_python(
        {"solution.py": program, "harness.py": HARNESS},
        "harness.py",
        stdin=json.dumps(job),
        limits=limits,
        isolation=isolation,
    )
    results = _harness_results(verdict, len(tests))
    passed, first_error = [], None
    for test, result in zip(tests, results, strict=True):
        ok, error = _check_one(test, result, spec.style)
        passed.append(ok)
        first_error = first_error or error
    if verdict.status != "ok" and first_error is None and not all(passed):
        first_error = f"the run ended: {verdict.status}"
    return TestReport(passed, verdict.status, first_error, verdict.isolation)


def _harness_results(verdict: Verdict, n: int) -> list[dict[str, Any]]:
    """The harness's per-test results; tests without one failed (the run was cut short)."""
    missing = {"ok": False, "error": f"no result (run {verdict.status})"}
    for line in reversed(verdict.stdout.splitlines()):
        if line.startswith(RESULTS_MARKER):
            try:
                results = json.loads(line[len(RESULTS_MARKER) :])
            except json.JSONDecodeError:
                break
            if isinstance(results, list) and len(results) == n:
                return [r if isinstance(r, dict) else missing for r in results]
            break
    return [missing] * n


POLICY_SYSTEM = (
    "You are an expert Python programmer. Think briefly about the problem, then answer with one "
    "complete program in a single ```python code block."
)


def policy_messages(spec: CodingSpec) -> list[dict[str, str]]:
    """The policy's prompt for a coding task."""
    if spec.style == "stdio":
        how = "Read the input from standard input and print the answer to standard output."
    else:
        how = f"Define the function `{spec.entry_point}`; do not read input or print."
    return [
        {"role": "system", "content": POLICY_SYSTEM},
        {"role": "user", "content": f"{spec.problem.strip()}\n\n{how}"},
    ]


def describe_report(report: TestReport) -> str:
    """The observation after a coding step: how many tests passed and the first failure."""
    text = f"{sum(report.passed)}/{len(report.passed)} tests passed"
    return f"{text}; first failure: {report.error}" if report.error else text


@dataclass(frozen=True)
class CodeRunner:
    """How coding tasks' programs are run: the sandbox's isolation level and memory cap."""

    isolation: Isolation | None = None
    """None: the strongest level this machine offers."""
    memory_mb: int = 1024
    workers: int = max(1, os.cpu_count() or 1)
    """Programs checked at once (the sandbox also never runs more than the cores at once)."""

    def run(
        self, program: str | None, spec: CodingSpec, tests: Sequence[CodeTest] | None = None
    ) -> TestReport:
        return run_tests(program, spec, tests, isolation=self.isolation, memory_mb=self.memory_mb)


class CodingEpisode:
    """A coding task as the policy plays it: one step, whose answer's program is tested."""

    screenshot: str | None = None

    def __init__(self, spec: CodingSpec, runner: CodeRunner) -> None:
        self.spec = spec
        self.runner = runner
        self.goal_text = spec.problem
        self.observation = spec.problem
        self.steps_taken = 0
        self.done = False
        self.success = False
        self.report: TestReport | None = None

    def messages(self) -> list[dict[str, str]]:
        return policy_messages(self.spec)

    def act(self, answer: str) -> Move:
        program = extract_program(answer)
        self.report = self.runner.run(program, self.spec)
        self.steps_taken, self.done = 1, True
        self.success = self.report.all_passed
        return Move(
            action=program,
            valid=program is not None,
            observation=describe_report(self.report),
            progress=self.success,
            done=True,
            pass_fraction=self.report.pass_fraction,
        )


JUDGE_SYSTEM = (
    "You judge ONE answer of a programmer. Given the problem and the answer (reasoning and "
    "program), answer +1 if the program solves the problem correctly for every valid input and "
    "the reasoning is relevant and free of invented facts; otherwise -1. Think first, then put "
    "the score in \\boxed{}, as \\boxed{1} or \\boxed{-1}."
)


def judge_messages(problem: str, response: str, program: str | None) -> list[dict[str, str]]:
    """The reward model's prompt in step-judge mode for a coding answer. The test results are
    not shown: they are the outcome the judge's verdicts are scored against."""
    code = program if program is not None else "(no python code block)"
    user = f"Problem: {problem.strip()}\n\nAnswer: {response.strip()}\n\nProgram:\n{code}"
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]
