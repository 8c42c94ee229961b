"""The environment interface: loading a class by name, import path or file; options validated by
the environment's own model; built-ins behind the interface; the core imports no orchestration."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlanything_core.envs.common import SpecError
from rlanything_core.envs.demos import demo_critique
from rlanything_core.envs.interface import (
    Environment,
    StepView,
    WarmStart,
    builtin_names,
    environment_class,
    make_environment,
)
from rlanything_core.run.config import ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[2]
CORRIDOR = "examples/corridor/corridor.py:CorridorEnvironment"


def test_every_builtin_loads_by_name_and_its_specs_round_trip() -> None:
    assert builtin_names() == ["alfworld", "coding", "gui", "household", "openenv", "textworld"]
    for name in builtin_names():
        assert issubclass(environment_class(name), Environment), name
    for name in ("household", "coding"):
        env = make_environment(name, {}, "id")[0]
        for spec in env.generate("id", 3, seed=1):
            assert env.parse_spec(spec.to_json()) == spec


def test_unknown_names_and_bad_paths_say_how_to_fix_them(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'housework' is not a known environment.*file\.py"):
        environment_class("housework")
    with pytest.raises(ValueError, match=r"cannot import module 'no_such_pkg\.envs'.*PYTHONPATH"):
        environment_class("no_such_pkg.envs:Thing")
    with pytest.raises(ValueError, match="no Environment subclass 'Path'"):
        environment_class("pathlib:Path")
    with pytest.raises(ValueError, match="is not a Python file"):
        environment_class(f"{tmp_path}/missing.py:Env")
    with pytest.raises(ConfigError, match=r"environment\.name.*housework"):
        parse_config({"environment": {"name": "housework"}})


def test_options_are_validated_by_the_environment_and_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"environment\.options\.stepslack: Extra inputs"):
        parse_config({"environment": {"options": {"stepslack": 3}}})
    with pytest.raises(ConfigError, match=r"environment\.options\.history_steps"):
        parse_config({"environment": {"options": {"history_steps": -1}}})
    config = parse_config({"environment": {"options": {"step_slack": 3}}})
    assert config.environment.options["step_slack"] == 3
    assert config.environment.options["history_steps"] == 2  # defaults filled in
    # the spelling before `options` still loads (old configs and run directories)
    flat = parse_config({"environment": {"step_slack": 3}})
    assert flat.environment == config.environment


def test_a_user_environment_loads_from_its_file_with_its_own_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError, match=r"environment\.options\.slackk"):
        parse_config({"environment": {"name": CORRIDOR, "options": {"slackk": 1}}})
    config = parse_config({"environment": {"name": CORRIDOR, "options": {"slack": 1}}})
    env = config.environment.env
    spec = env.generate("id", 1, seed=0)[0]
    assert spec.max_steps == abs(spec.door - spec.start) + 1
    with pytest.raises(SpecError, match="max_steps"):
        env.parse_spec({**spec.model_dump(), "max_steps": 0})
    episode = env.new_episode(spec, None, None)
    move = "right" if spec.door > spec.start else "left"
    assert episode.act(f"I go \\boxed{{{move}}}").progress
    invalid = episode.act("\\boxed{up}")
    assert not invalid.valid and invalid.action is None  # counted, never an error
    child, error = env.parse_proposal('{"length": 40}', spec)
    assert error is None and child is not None and child.length == 40
    assert env.parse_proposal('{"length": 99}', spec)[0] is None
    step = StepView("reach the door", "at 1", "\\boxed{left}", "left", "at 0")
    assert "\\boxed{1}" in env.judge_messages(step, [])[0]["content"]


def test_importing_the_core_loads_no_orchestration() -> None:
    code = (
        "import importlib, pkgutil, sys, rlanything_core\n"
        "for m in pkgutil.walk_packages(rlanything_core.__path__, 'rlanything_core.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(k for k in ('prefect', 'mlflow', 'prefect_dask') if k in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


LAYERS = {"base": 0, "sandbox": 0, "method": 1, "envs": 2, "models": 3, "run": 4}
"""rlanything_core's packages, each importing only from lower ones (docs/concepts.md)."""


def _core_imports() -> dict[str, set[str]]:
    """Each core module's imports of core modules, lazy ones (inside functions) included."""
    import ast

    import rlanything_core

    root = Path(rlanything_core.__file__).parent
    names = {
        ".".join(("rlanything_core", *f.relative_to(root).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): f
        for f in root.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlanything_"):
                for alias in node.names:  # `from package import module` names the module
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in names else str(node.module))
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in names}
        graph[name] = found - {name}
    return graph


def test_core_packages_import_only_downward() -> None:
    graph = _core_imports()

    def layer(module: str) -> int:
        parts = module.split(".")
        return LAYERS[parts[1]] if len(parts) > 1 else -1  # the package's own __init__

    upward = [(m, i) for m, imps in graph.items() for i in imps if layer(i) > layer(m) >= 0]
    assert not upward, f"imports up the layers (docs/concepts.md, 'Code layout'): {upward}"
    # No circle of modules, lazy imports included: depth-first search for a back edge.
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph.get(module, ())):
            assert state.get(nxt) != 1, f"import circle: {' -> '.join([*path, module, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert len(graph) > 50 and {
        "rlanything_core.models.loading",
        "rlanything_core.models.tiny",
    } <= set(graph)


def test_an_invalid_answer_read_back_from_parquet_is_judged_as_invalid(tmp_path: Path) -> None:
    """Rollouts read back from Parquet hold NaN, not None, where an answer named no action: the
    judge prompt says the answer was invalid (as the RM's warm start does), never "nan"."""
    import pandas as pd

    rows = pd.DataFrame(
        {
            "task_id": ["t", "t"],
            "task_version": [1, 1],
            "rollout_idx": [0, 0],
            "step_idx": [0, 1],
            "goal": ["g", "g"],
            "observation": ["o0", "o1"],
            "response": ["\\boxed{99}", "\\boxed{1}"],
            "action": [None, "look"],
            "next_observation": ["Nothing happens.", "o2"],
        }
    )
    rows.to_parquet(tmp_path / "r.parquet")
    back = pd.read_parquet(tmp_path / "r.parquet")
    back["action"] = back["action"].astype(object).where(back["action"].notna(), float("nan"))
    from rlanything_core.run.judging import judge_prompts

    first, second = judge_prompts(back, make_environment("household", {}, "id")[0])
    assert "Chosen action: (invalid answer: no admissible action)" in first[1]["content"]
    assert "> (invalid)\nNothing happens." in second[1]["content"]
    assert "nan" not in first[1]["content"] + second[1]["content"]


def test_warm_start_episodes_per_task_replays_fewer_tasks_with_different_noise() -> None:
    """warm_start.episodes_per_task: ⌈episodes / k⌉ tasks, each played k times, and the noisy
    replays of one task are different episodes (more distinct pairs than one episode gives)."""
    env = make_environment("household", {}, "id")[0]
    request = WarmStart("policy", 7, 0.5, 0.2, False, specs_seed=3, seed=0, episodes_per_task=3)
    specs = env.warm_start_specs(request)
    distinct = env.generate(env.pool_split, 3, seed=3)
    assert specs == [distinct[0]] * 3 + [distinct[1]] * 3 + [distinct[2]]
    assert env.warm_start_specs(dataclasses.replace(request, episodes_per_task=1)) == list(
        env.generate(env.pool_split, 7, seed=3)
    )
    demos = env.demonstrations(request)
    by_episode: dict[str, list[str]] = {}
    for d in demos:
        by_episode.setdefault(d.task_id, []).append(str(d.prompt))
    assert len(by_episode) == 7
    first_task = [tuple(by_episode[f"demo-{n:03d}"]) for n in range(3)]
    assert len(set(first_task)) > 1  # the noise plays the same task differently


def test_env_model_warm_start_teaches_the_critique_its_rewrites_carry() -> None:
    """The environment model's demonstrations come in pairs, as a round asks: the critique prompt
    a round builds (the task, its accuracy, the reviewer's verdicts) answered with a plain
    summary of what it shows, then the rewrite prompt carrying that very critique, answered with
    the fields that change. No critique reads like JSON (probe ev-i: JSON critiques were copied
    into invalid rewrites)."""
    env = make_environment("household", {"goals": ["put"]}, "id")[0]
    request = WarmStart("env_model", 60, 0.0, 0.0, True, specs_seed=3, seed=0)
    made = env.demonstrations(request)
    assert len(made) % 2 == 0 and len(made) >= 80  # a few moves fail validation
    said = set()
    for critique, rewrite in zip(made[::2], made[1::2], strict=True):
        assert critique.task_id == rewrite.task_id and (critique.step_idx, rewrite.step_idx) == (
            0,
            1,
        )
        asked = critique.prompt[-1]["content"]
        accuracy = int(re.search(r"succeeded in (\d+)%", asked).group(1)) / 100
        flagged = "No progress. \\boxed{-1}" in asked
        quoted = asked.count("\\boxed{")
        assert critique.answer == demo_critique(accuracy, [-1] * flagged + [1] * (quoted - flagged))
        assert not re.search(r"[\d{}]", critique.answer)
        assert f"Critique: {critique.answer}" in rewrite.prompt[-1]["content"]
        assert set(json.loads(rewrite.answer)) <= set(env.rewrite_knobs)
        said.add(critique.answer)
    # both outcomes, with and without flagged steps, and with no quotes at all
    assert said == {
        f"{outcome}{steps}"
        for outcome in ("The agent solves this task easily.", "The agent fails this task.")
        for steps in ("", " The reviewer flags steps that make no progress.",
                      " The reviewer approves its steps.")
    }  # fmt: skip


def test_household_rewrite_example_points_the_asked_way() -> None:
    """A model that copies the prompt's example moves the task the asked way: more steps for an
    easier task, more distractors for a harder one, within the fields' ranges."""
    env = make_environment("household", {"goals": ["put"]}, "id")[0]
    spec = env.parse_spec(
        {"goal_type": "put", "object": "mug", "target": "desk", "num_rooms": 1,
         "num_distractors": 1, "max_steps": 12, "layout_seed": 7}
    )  # fmt: skip

    def example(direction: str) -> dict[str, int]:
        asked = env.rewrite_messages(spec, direction, 0.0, "The agent fails this task.")
        text = asked[-1]["content"]
        assert f"Make it {direction}." in text
        return json.loads(text.rsplit("for example ", 1)[1].removesuffix("."))

    assert example("easier") == {"max_steps": 20}
    assert example("harder") == {"num_distractors": 3}
    for direction in ("easier", "harder"):
        proposed, error = env.parse_proposal(json.dumps(example(direction)), spec)
        assert error is None and proposed is not None
