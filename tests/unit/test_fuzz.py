"""Bad input: seeded fuzzing of every parser a model's answer meets, and of configs and task files.

Policy answers (`parse_action`), judge verdicts (`parse_verdict`) and environment-model rewrite
proposals (`Environment.parse_proposal`, each built-in environment and the corridor example)
get random bytes, huge strings, unicode, nested braces and JSON bombs. Each must come back as a
value or as None with a reason (the stages count those), never as an exception, and quickly.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from rlanything_core.base.schemas import (
    SchemaError,
    read_dataset,
    rows_frame,
    to_table,
    write_dataset,
)
from rlanything_core.envs.alfworld.game import AlfworldSpec
from rlanything_core.envs.common import validate_spec
from rlanything_core.envs.interface import make_environment
from rlanything_core.envs.rewriting import merge_proposal
from rlanything_core.envs.textworld.game import TextWorldSpec
from rlanything_core.method.parsing import parse_action, parse_verdict
from rlanything_core.models.engines import OpenAIEngine
from rlanything_core.models.loading import load_model
from rlanything_core.run.config import ConfigError, load_config

ACTIONS = ["go to shelf 1", "take mug 1 from shelf 1", "look", "open cabinet 2"]


def _json_value(rng: random.Random, depth: int = 0) -> object:
    pick = rng.randrange(9 if depth < 3 else 6)
    if pick == 0:
        return rng.choice([0, -1, 1, 2**63, -(2**80), 7])
    if pick == 1:
        return rng.choice([0.5, -1e308, 1e-320, 3.0])
    if pick == 2:
        return rng.choice([True, False, None])
    if pick == 3:
        return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(12)))
    if pick == 4:
        return rng.choice(["", "put", "id", "builtin", "x" * 5000, "💥", "\u202e"])
    if pick == 5:
        return rng.choice([[], [1, 2], ["a"], [[1]], [1, 1, 1, 1, 1]])
    if pick == 6:
        return [_json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(_KEYS): _json_value(rng, depth + 1) for _ in range(rng.randrange(4))}


_KEYS = [
    # fields of the built-in specs, so merges reach their validation
    "goal", "num_rooms", "num_distractors", "seed", "max_steps", "nb_objects", "world_size",
    "quest_length", "problem", "tests", "entry_point", "hints", "app", "length", "source",
    "", "__class__", "💥",
]  # fmt: skip


def fuzz_texts(seed: int, n: int) -> Iterator[str]:
    """Random answers: bytes, unicode, boxes, JSON with every kind of value, and bombs."""
    rng = random.Random(seed)
    yield ""
    yield "\x00" * 1000
    yield "x" * 1_000_000 + "\\boxed{1}"  # a runaway answer, its box at the end
    yield "\\boxed{" * 100_000
    yield "{" * 200_000
    yield '{"a":' * 100_000
    yield '{"a":' + "[" * 30_000 + "]" * 30_000 + "}"  # nested past the recursion limit
    yield '{"seed": ' + "9" * 5000 + "}"  # past int()'s digit limit
    yield '{"seed": 1e999, "num_rooms": NaN}'
    yield '{"num_rooms": "2"} trailing {"num_rooms": [2]}'
    yield "\\boxed{\ud800}"  # a lone surrogate, as a decoder may leave one
    for _ in range(n):
        kind = rng.randrange(5)
        if kind == 0:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(300))).decode(
                "utf-8", errors="surrogateescape"
            )
        elif kind == 1:
            yield "".join(chr(rng.randrange(1, 0x10FFFF)) for _ in range(rng.randrange(200)))
        elif kind == 2:
            inner = rng.choice([*ACTIONS, "1", "+1", "−1", "-1", "0", "5", " 2 ", "1.0", "{}"])
            yield "I think " + "\\boxed{" * rng.randrange(3) + inner + "}" * rng.randrange(4)
        elif kind == 3:
            yield "Here: " + json.dumps(_json_value(rng), ensure_ascii=rng.random() < 0.5)
        else:
            body = json.dumps({rng.choice(_KEYS): _json_value(rng) for _ in range(3)})
            yield body[: rng.randrange(len(body) + 1)] + rng.choice(["", "}", "}}", "]"])


def test_policy_answers_and_verdicts_never_raise() -> None:
    start = time.perf_counter()
    for text in fuzz_texts(seed=0, n=3000):
        for fmt in ("number", "text"):
            index = parse_action(text, ACTIONS, fmt)
            assert index is None or 0 <= index < len(ACTIONS)
        assert parse_verdict(text) in (-1, 1, None)
    assert time.perf_counter() - start < 30


@pytest.mark.parametrize("name", ["household", "coding", "gui", "corridor"])
def test_rewrite_proposals_are_a_spec_or_a_reason_never_an_exception(name: str) -> None:
    source = CORRIDOR if name == "corridor" else name
    env = make_environment(source, {}, "id")[0]
    _fuzz_proposals(env.parse_proposal, env.generate("id", 1, seed=0)[0], env.parse_spec)


@pytest.mark.parametrize("name", ["textworld", "alfworld"])
def test_game_proposals_are_a_spec_or_a_reason_never_an_exception(name: str) -> None:
    """TextWorld and ALFWorld proposals up to the field validation (`validate_spec`) that comes
    before their game is generated or looked up (seconds a game; tested in their own modules)."""
    model = {"textworld": TextWorldSpec, "alfworld": AlfworldSpec}[name]
    parent = model.model_validate(_GAME_SPECS[name])

    def parse(data: str | dict[str, object]) -> Any:
        return validate_spec(model, data, name)

    _fuzz_proposals(lambda text, spec: merge_proposal(text, spec, parse), parent, parse)


def _fuzz_proposals(
    propose: Callable[[str, Any], tuple[Any, str | None]], parent: Any, parse: Callable[..., Any]
) -> None:
    start, invalid = time.perf_counter(), 0
    for text in fuzz_texts(seed=1, n=1500):
        spec, why = propose(text, parent)
        assert (spec is None) != (why is None), (text[:200], spec, why)
        if spec is None:
            assert isinstance(why, str) and why
            invalid += 1
        else:
            assert parse(spec.to_json()) == spec  # a valid proposal round-trips
    assert invalid > 1000  # nearly all of it is garbage, and each one is counted as such
    assert time.perf_counter() - start < 60


CORRIDOR = "examples/corridor/corridor.py:CorridorEnvironment"
_GAME_SPECS: dict[str, dict[str, object]] = {
    "textworld": {"world_size": 1, "nb_objects": 2, "quest_length": 1, "max_steps": 8, "seed": 3},
    "alfworld": {"game": "train/some-task/trial_1/game.tw-pddl", "max_steps": 30},
}


# -- task files and configs: one clear error naming the file and the field, nothing written

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
_JUNK: list[object] = [
    None, -1, 0, 2**70, 1e308, float("nan"), "", "x" * 10_000, "💥", [], {}, [1, [2, [3]]],
    {"a": {"b": None}}, True, "nan", "-1", ["put", 3],
]  # fmt: skip


def _mutate(data: dict[str, Any], rng: random.Random) -> None:
    """Replace, delete or add one key somewhere in the config's tree, or give it junk."""
    node: Any = data
    while isinstance(node, dict) and node and rng.random() < 0.6:
        key = rng.choice(sorted(node, key=str))
        if not isinstance(node[key], dict):
            break
        node = node[key]
    if not isinstance(node, dict) or not node:
        return
    key = rng.choice(sorted(node, key=str))
    op = rng.randrange(3)
    if op == 0:
        node[key] = rng.choice(_JUNK)
    elif op == 1:
        del node[key]
    else:
        node[rng.choice(["extra", "lr", "rounds", "name", "options", "💥"])] = rng.choice(_JUNK)


def test_mutated_configs_load_or_raise_one_config_error_naming_the_file(tmp_path: Path) -> None:
    rng, refused = random.Random(0), 0
    for base in CONFIGS:
        data = yaml.safe_load(base.read_text())
        for k in range(30):
            mutated = copy.deepcopy(data)
            _mutate(mutated, rng)
            path = tmp_path / f"{base.stem}-{k}.yaml"
            path.write_text(yaml.safe_dump(mutated, allow_unicode=True))
            try:
                load_config(path)
            except ConfigError as exc:
                assert str(path) in str(exc), exc
                refused += 1
    assert refused > len(CONFIGS) * 10
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{b.stem}-{k}.yaml" for b in CONFIGS for k in range(30)
    )  # loading wrote nothing


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (b"rounds: 2\n\xff\xfe\n", r"not UTF-8 text \(byte 10"),
        (b"rounds: [2\n", "not valid YAML"),
        (b"a: &a [*a]\n", "more than 100000 values"),
        (
            b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + b"".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n".encode()
                for p, n in zip("abcdef", "bcdefg", strict=True)
            )
            + b"rounds: *g\n",
            "more than 100000 values",
        ),
    ],
)
def test_unreadable_configs_are_one_config_error(tmp_path: Path, text: bytes, error: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(text)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=error):
        load_config(path)
    assert time.perf_counter() - start < 5


def _tasks_table() -> pa.Table:
    env = make_environment("household", {}, "id")[0]
    specs = env.generate("id", 3, seed=0)
    rows = [
        {"round": 0, "task_id": f"t{i}", "task_version": 0, "parent_task_id": None,
         "origin": "seed", "direction": None, "created_round": 0, "acc_parent": None,
         "acc_candidate": None, "env": "household", "spec": s.to_json()}
        for i, s in enumerate(specs)
    ]  # fmt: skip
    return to_table(rows_frame(rows, "tasks"), "tasks")


def test_mutated_task_files_are_one_schema_error_naming_the_file_and_column(
    tmp_path: Path,
) -> None:
    good = _tasks_table()
    rng = random.Random(0)
    for k in range(60):
        table, column = good, rng.choice(good.column_names)
        op = rng.randrange(5)
        if op == 0:
            table = table.drop_columns([column])
        elif op == 1:
            column = rng.choice(["extra", "score", "💥"])
            table = table.append_column(column, pa.array([1, 2, 3]))
        elif op == 2:
            i = table.schema.get_field_index(column)
            kind = pa.string() if table.schema.field(i).type != pa.string() else pa.int64()
            junk = ["1", "2", "x"] if kind == pa.string() else [1, 2, 3]
            table = table.set_column(i, column, pa.array(junk, type=kind))
        elif op == 3:
            column = rng.choice(["round", "task_id", "env", "spec", "origin"])
            i = table.schema.get_field_index(column)
            typ = table.schema.field(i).type
            table = table.set_column(i, column, pa.array([None, None, None], type=typ))
        else:
            column = "rlanything.schema_version"
            version = rng.choice([b"2", b"99", b"0", b"v1", b""])
            table = table.replace_schema_metadata({column.encode(): version})
        path = tmp_path / f"tasks-{k}.parquet"
        pq.write_table(table, path)
        before = sorted(tmp_path.iterdir())
        with pytest.raises(SchemaError) as caught:
            read_dataset(path, "tasks")
        assert str(path) in str(caught.value) and column in str(caught.value), caught.value
        assert sorted(tmp_path.iterdir()) == before
    written = write_dataset(good.to_pandas(), tmp_path / "good.parquet", "tasks")
    assert len(read_dataset(written, "tasks")) == 3  # this version reads what it writes


def test_a_served_answer_with_lone_surrogates_or_no_text_becomes_storable_text() -> None:
    """An OpenAI-compatible server's JSON may carry "\\ud800" or a non-string content; the engine
    hands on text that a Parquet file can hold (a rollout row), never an exception."""
    answers = iter(['"go \\ud800 \\\\boxed{1}"', "null", '["parts"]', '"\\udfff"'])

    def handler(request: httpx.Request) -> httpx.Response:
        body = '{"choices": [{"message": {"content": %s}, "finish_reason": "stop"}]}'
        return httpx.Response(200, text=body % next(answers))

    _, tokenizer = load_model("tiny", device="cpu")
    engine = OpenAIEngine("http://fake", "m", tokenizer, concurrency=1)
    engine.client = httpx.Client(transport=httpx.MockTransport(handler))
    outs = engine.generate([[{"role": "user", "content": "hi"}]] * 4, [0, 1, 2, 3],
                           max_new_tokens=8, temperature=1.0, batch_size=1)  # fmt: skip
    texts = [o.text for o in outs]
    assert texts[0].startswith("go ") and texts[0].endswith("\\boxed{1}") and texts[1:3] == ["", ""]
    assert pa.array(texts).to_pylist() == texts  # storable
    assert parse_action(texts[0], ACTIONS, "number") == 0
