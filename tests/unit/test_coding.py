"""The coding environment: specs, the test harness, hostile programs against a real round's test
runner, the unit-test reward and metrics, rewrites, and HumanEval from its package."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlanything_core import sandbox
from rlanything_core.base.schemas import SchemaError
from rlanything_core.envs.coding.humaneval import load_humaneval
from rlanything_core.envs.coding.problems import generate_coding_specs, problems, reference_pairs
from rlanything_core.envs.coding.tasks import (
    CodeRunner,
    CodeTest,
    CodingSpec,
    extract_program,
    parse_coding_spec,
    run_tests,
    same_stdout,
    same_value,
)
from rlanything_core.envs.coding.unit_tests import parse_unit_test
from rlanything_core.envs.common import SpecError
from rlanything_core.envs.interface import make_environment
from rlanything_core.method.feedback import unit_test_rewards
from rlanything_core.method.signals import test_samples as compute_test_samples

NAMESPACES = sandbox.isolation_level() != "rlimits"
CODING = make_environment("coding", {}, "id")[0]

ADD = CodingSpec(
    problem="Write add(a, b).",
    style="function",
    entry_point="add",
    tests=[CodeTest(args=[1, 2], expected=3), CodeTest(args=[5, 0], expected=5)],
    time_limit_s=1.0,
)
SUM = CodingSpec(
    problem="Print the sum of two integers.",
    style="stdio",
    tests=[CodeTest(stdin="1 2\n", expected="3\n"), CodeTest(stdin="5 5\n", expected="10\n")],
    time_limit_s=1.0,
)
GOOD_ADD = "def add(a, b):\n    return a + b\n"
GOOD_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"


def test_extract_program_takes_the_last_block() -> None:
    assert extract_program("x\n```python\nprint(1)\n```\ny\n```\nprint(2)\n```") == "print(2)\n"
    assert extract_program("```py\nprint(3)\n```") == "print(3)\n"
    assert extract_program("no code here") is None
    assert extract_program("```python\n   \n```") is None


def test_comparisons() -> None:
    assert same_stdout("3  \n\n", "3\n") and not same_stdout("3\n4\n", "3\n")
    assert same_value(0.1 + 0.2, 0.3, 0.0) and not same_value(1, True, 0.0)
    assert same_value([1, {"a": 2.0}], [1, {"a": 2}], 0.0)
    assert not same_value("3", 3, 0.0) and not same_value([1, 2], [1], 0.0)
    assert same_value(1.05, 1.0, 0.1) and not same_value(1.2, 1.0, 0.1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"problem": "p", "style": "function", "tests": [{"args": [], "expected": 1}]}, "entry"),
        ({"problem": "p", "style": "stdio", "tests": [{"args": [1], "expected": "1"}]}, "stdin"),
        ({"problem": "p", "style": "stdio", "tests": []}, "tests"),
        ({"problem": "p", "style": "stdio", "tests": [{"stdin": "", "expected": 1}]}, "text"),
        ({"problem": "p", "style": "bash", "tests": [{"stdin": "", "expected": ""}]}, "style"),
    ],
)
def test_invalid_specs_name_the_problem(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_coding_spec(fields)


def test_every_builtin_reference_passes_and_a_wrong_program_fails() -> None:
    pairs = reference_pairs("id", len(problems("id")), 0) + reference_pairs(
        "ood", len(problems("ood")), 0
    )
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda p: run_tests(p[1], p[0]), pairs))
    assert [r.all_passed for r in reports] == [True] * len(pairs)
    wrong = run_tests("def add(a, b):\n    return a - b\n", ADD)
    assert wrong.passed == [False, True] and wrong.pass_fraction == 0.5
    assert run_tests(None, ADD).status == "no_program"


def test_task_generation_is_seeded_and_bounded() -> None:
    a, b = generate_coding_specs("id", 5, 3), generate_coding_specs("id", 5, 3)
    assert a == b and len({s.to_json() for s in a}) == 5
    with pytest.raises(SpecError, match="num_tasks"):
        generate_coding_specs("ood", 99, 0)


# ---- hostile programs, each a candidate answer checked the way a round checks it ------------
# Each program does its harmful thing and then prints the right answer only if the harm worked,
# so with the sandbox doing its job each one fails its own tests.


def _hostile(tmp_path: Path, server_port: int, victim: int) -> dict[str, tuple[str, CodingSpec]]:
    outside = tmp_path / "outside.txt"
    answer_if = "a, b = map(int, input().split())\nprint(a + b if {cond} else -1)\n"
    return {
        "infinite loop": ("while True:\n    pass\n", SUM),
        "fork bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                      "        pass\n", SUM),
        "memory bomb": ("x = bytearray(8 << 30)\n" + GOOD_SUM, SUM),
        "1 GB of output": ("import sys\nfor _ in range(1024):\n"
                           "    sys.stdout.write('x' * (1 << 20))\n" + GOOD_SUM, SUM),
        "write outside": (f"open({str(outside)!r}, 'w').write('x')\n" + GOOD_SUM, SUM),
        "read secrets": ("import os\nsecret = os.environ.get('RLANYTHING_SECRET', '')\n"
                         + answer_if.format(cond="secret"), SUM),
        "open a socket": (f"import socket\nsocket.create_connection(('127.0.0.1', {server_port}), "
                          "timeout=1).close()\n" + GOOD_SUM, SUM),
        "kill the parent": ("import os, signal\n"
                            f"for pid in (os.getppid(), {victim}, {os.getpid()}):\n"
                            "    os.kill(pid, signal.SIGKILL)\n" + GOOD_SUM, SUM),
        "sys.exit": ("import sys\nsys.exit(0)\n" + GOOD_ADD, ADD),
        "os._exit": ("import os\nos._exit(0)\n" + GOOD_ADD, ADD),
        "always-equal object": ("class Yes:\n    def __eq__(self, other):\n        return True\n"
                                "def add(a, b):\n    return Yes()\n", ADD),
        "patch the checker": ("import __main__, json\njson.dumps = lambda v: '3'\n"
                              "__main__.results.append({'ok': True, 'value': '3'})\n"
                              "def add(a, b):\n    return 0\n", ADD),
        "forge the results": ("import os\nos.write(3, b'\\n@@rlanything-results@@"
                              "[{\"ok\": true, \"value\": \"3\"}, "
                              "{\"ok\": true, \"value\": \"3\"}]\\n')\nos._exit(0)\n", ADD),
        "delete its files": ("import os\n"
                             "for d in ('.', os.path.dirname(os.path.abspath(__file__))):\n"
                             "    for f in os.listdir(d):\n        try:\n"
                             "            os.remove(os.path.join(d, f))\n        except OSError:\n"
                             "            pass\ndef add(a, b):\n    return a - b\n", ADD),
    }  # fmt: skip


@pytest.mark.skipif(not NAMESPACES, reason="needs user namespaces (bubblewrap or unshare)")
def test_hostile_programs_fail_their_tests_and_harm_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLANYTHING_SECRET", "1")
    connections: list[object] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)

        def accept() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not stop.is_set():
                try:
                    connections.append(server.accept())
                except TimeoutError:
                    continue

        stop = threading.Event()
        listener = threading.Thread(target=accept)
        listener.start()
        victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        try:
            hostile = _hostile(tmp_path, server.getsockname()[1], victim.pid)
            runner = CodeRunner(memory_mb=512)
            # A round checks many programs at once: the hostile ones beside correct ones.
            batch = [(name, program, spec) for name, (program, spec) in hostile.items()]
            batch += [("correct add", GOOD_ADD, ADD), ("correct sum", GOOD_SUM, SUM)]
            with ThreadPoolExecutor(runner.workers) as pool:
                reports = dict(
                    zip(
                        [name for name, *_ in batch],
                        pool.map(lambda b: runner.run(b[1], b[2]), batch),
                        strict=True,
                    )
                )
            assert victim.poll() is None, "a sandboxed program killed an unrelated process"
        finally:
            stop.set()
            listener.join()
            victim.send_signal(signal.SIGKILL)
            victim.wait()
    failed_wrongly = {n: r.passed for n, r in reports.items() if n in hostile and r.all_passed}
    assert failed_wrongly == {}
    assert reports["correct add"].all_passed and reports["correct sum"].all_passed
    assert not (tmp_path / "outside.txt").exists()
    assert connections == []
    assert reports["infinite loop"].error is not None
    # the sandbox still works afterwards
    assert run_tests(GOOD_SUM, SUM).all_passed


# ---- the reward model as a unit-test writer ---------------------------------------------------


def test_unit_test_rewards_by_hand() -> None:
    # programs: p0 correct, p1 correct, p2 wrong, p3 wrong; tests t0..t3, t3 unparsable
    passes = np.array(
        [
            [1, 1, 0, 0],  # p0
            [1, 1, 1, 0],  # p1
            [0, 1, 0, 0],  # p2
            [1, 1, 1, 0],  # p3
        ],
        dtype=bool,
    )
    correct_programs = np.array([True, True, False, False])
    valid = np.array([True, True, True, False])
    result = unit_test_rewards(passes, correct_programs, valid, invalid_penalty=-2.0)
    assert result is not None
    rewards, correct = result
    # t0: correct (p0, p1 pass); the wrong p2 fails it, p3 passes → +1
    # t1: correct; no wrong program fails it → 0
    # t2: incorrect (p0 fails); wrong programs passing it: p3 → −1
    # t3: unparsable → the penalty −2
    np.testing.assert_array_equal(rewards, [1.0, 0.0, -1.0, -2.0])
    np.testing.assert_array_equal(correct, [True, True, False, False])
    # no wrong program: ±1 by correctness; no correct program: no signal at all
    only_right = unit_test_rewards(passes[:2], correct_programs[:2], valid, -2.0)
    assert only_right is not None
    np.testing.assert_array_equal(only_right[0], [1.0, 1.0, -1.0, -2.0])
    assert unit_test_rewards(passes[2:], correct_programs[2:], valid, -2.0) is None


def test_test_samples_metrics_by_hand() -> None:
    # one task, 3 programs (p0 correct, p1 and p2 wrong), 3 generated tests (t2 invalid)
    rollouts = pd.DataFrame(
        {
            "task_id": "q",
            "task_version": 1,
            "rollout_idx": [0, 1, 2],
            "step_idx": 0,
            "outcome": [1, -1, -1],
        }
    )
    unit_tests = pd.DataFrame(
        {
            "round": 0,
            "task_id": "q",
            "task_version": 1,
            "test_idx": [0, 1, 2],
            "seed": [7, 8, 9],
            "checkpoint": "rm",
            "valid": [True, True, False],
        }
    )
    verdict = {(0, 0): 1, (0, 1): 1, (1, 0): -1, (1, 1): 1, (2, 0): -1, (2, 1): -1}
    judgments = pd.DataFrame(
        [
            {"task_id": "q", "task_version": 1, "rollout_idx": p, "vote_idx": t, "verdict": v}
            for (p, t), v in verdict.items()
        ]
        + [
            {"task_id": "q", "task_version": 1, "rollout_idx": p, "vote_idx": 2, "verdict": None}
            for p in range(3)
        ]
    )
    frame, metrics = compute_test_samples(
        rollouts, unit_tests, judgments, invalid_penalty=-2.0, eps=1e-6, band=(0.0, 1.0)
    )
    # t0 correct, fails both wrong programs → +2; t1 correct, fails p2 only → +1; t2 → −2
    assert frame["reward"].tolist() == [2.0, 1.0, -2.0]
    assert frame["correct"].tolist() == [True, True, None]
    assert frame["incorrect_failed"].tolist() == [2, 1, 0]
    # standardized over the task's 3 tests: mean 1/3; deviations 5/3, 2/3, −7/3; population
    # variance (25 + 4 + 49) / 27 = 26/9
    expected = (np.array([2.0, 1.0, -2.0]) - 1 / 3) / (np.sqrt(26 / 9) + 1e-6)
    np.testing.assert_allclose(frame["advantage"], expected)
    # UT accuracy: 2 of the 3 tests are correct; Detect: only t0 also fails every wrong program
    assert metrics["reward_model/ut_accuracy"] == pytest.approx(2 / 3)
    assert metrics["reward_model/detect"] == pytest.approx(1 / 3)
    assert metrics["reward_model/invalid_tests"] == 1.0


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ('Edge case: {"args": [0, 0], "expected": 0}', True),
        ('{"stdin": "1 2", "expected": "3"}', False),  # wrong style for a function task
        ('{"args": 5, "expected": 0}', False),
        ("I would test zero.", False),
        ('{"args": [1, 2], "expected": }', False),
    ],
)
def test_parse_unit_test(text: str, ok: bool) -> None:
    test, error = parse_unit_test(text, ADD)
    assert (test is not None) == ok and (error is None) == ok


def test_coding_rewrites_merge_problem_and_tests() -> None:
    text = (
        'Harder: {"problem": "Write add(a, b) for big ints.", '
        '"tests": [{"args": [10000000000, 1], "expected": 10000000001}]}'
    )
    spec, error = CODING.parse_proposal(text, ADD)
    assert error is None and isinstance(spec, CodingSpec)
    assert spec.entry_point == "add" and spec.tests[0].args == [10000000000, 1]
    bad, error = CODING.parse_proposal('{"tests": [{"stdin": "1", "expected": "1"}]}', ADD)
    assert bad is None and "args" in str(error)


def test_humaneval_loads_from_the_package_without_download() -> None:
    tasks = load_humaneval()
    everything = load_humaneval(complete_only=False)
    assert len(tasks) >= 100 and len(everything) > len(tasks)
    first = tasks[0]
    assert first.task_id == "HumanEval/0" and first.spec.entry_point == "has_close_elements"
    assert first.spec.tests[0] == CodeTest(
        args=[[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3], expected=True
    )
    for task in tasks[:5]:
        assert run_tests(task.reference, task.spec).all_passed, task.task_id
        json.loads(task.spec.to_json())
    # converted to our task format, it round-trips through the tasks schema's spec column
    assert parse_coding_spec(first.spec.to_json()) == first.spec


def test_coding_config_checks() -> None:
    from rlanything_core.run.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="unit_tests"):
        parse_config({"reward_model": {"mode": "unit_tests"}})
    with pytest.raises(ConfigError, match="num_rooms is not an option of environment 'coding'"):
        parse_config({"environment": {"name": "coding", "num_rooms": [1, 2], "num_tasks": 2}})
    with pytest.raises(ConfigError, match="num_tasks"):
        parse_config({"environment": {"name": "coding", "num_tasks": 500}})
    with pytest.raises(ConfigError, match="action_format is not an option of environment"):
        parse_config({"environment": {"name": "coding", "num_tasks": 2, "action_format": "text"}})
    with pytest.raises(ConfigError, match=r"environment\.options\.sandbox\.memory_mb"):
        parse_config({"environment": {"name": "coding", "options": {"sandbox": {"memory_mb": 1}}}})
    with pytest.raises(ConfigError, match="has no env_model demonstrations"):
        parse_config(
            {"environment": {"name": "coding"}, "env_model": {"warm_start": {"enabled": True}}}
        )
    ok = parse_config(
        {
            "environment": {"name": "coding", "num_tasks": 3, "source": "humaneval"},
            "env_model": {"warm_start": {"enabled": False}},
        }
    )
    assert ok.environment.generate("id", 2, 0)[0].entry_point is not None


def test_sandbox_level_used_by_the_runner_is_recorded() -> None:
    report = CodeRunner().run(GOOD_ADD, ADD)
    assert report.isolation == sandbox.isolation_level()
    forced = CodeRunner(isolation="rlimits").run(GOOD_ADD, ADD)
    assert forced.all_passed and forced.isolation == "rlimits"


def test_humaneval_export_feeds_a_pool(tmp_path: Path) -> None:
    from rlanything_core.run.config import parse_config
    from rlanything_core.run.pool import initial_pool, task_refs
    from rlanything_flows.cli import main

    out = tmp_path / "humaneval.parquet"
    assert main(["humaneval", "--out", str(out)]) == 0
    config = parse_config(
        {"environment": {"name": "coding", "num_tasks": 3, "tasks_file": str(out)}}
    )
    pool = initial_pool(config.environment)
    assert pool["task_id"].tolist() == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    refs = task_refs(pool, config.environment.env)
    assert all(isinstance(r.spec, CodingSpec) for r in refs)
    wrong_env = parse_config({"environment": {"num_tasks": 3, "tasks_file": str(out)}})
    with pytest.raises(SchemaError, match=r"environment\.name"):
        initial_pool(wrong_env.environment)


def test_step_judge_mode_for_coding_hides_the_test_results() -> None:
    from rlanything_core.run.judging import judge_prompts

    rollouts = pd.DataFrame(
        {
            "task_id": ["q"],
            "task_version": [1],
            "rollout_idx": [0],
            "step_idx": [0],
            "goal": [ADD.problem],
            "observation": [ADD.problem],
            "response": ["Easy.\n```python\n" + GOOD_ADD + "```"],
            "action": [GOOD_ADD],
            "next_observation": ["2/2 tests passed"],
        }
    )
    (prompt,) = judge_prompts(rollouts, CODING)
    text = "\n".join(m["content"] for m in prompt)
    assert ADD.problem in text and GOOD_ADD.strip() in text and "\\boxed{1}" in text
    assert "tests passed" not in text
