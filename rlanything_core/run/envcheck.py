"""The environment contract, checked in seconds without a model (`rlanything check-env CONFIG`;
`train` runs the same checks before it loads a model).

Each check drives the environment the way the loop will and names what to change when the
environment breaks the contract of `rlanything_core.envs.interface`: tasks that generate, specs
that survive `to_json` → `parse_spec`, `SpecError` for a bad spec (anything else would end a
run the first time the environment model proposes one, were the loop not to count it), episodes
that end within their step limit whatever the policy answers, a rewrite example that is a valid
rewrite, the environment's own checks (`Environment.extra_checks`), and warm-start answers that
fit the tokens their role may generate.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Sequence
from typing import Any

from rlanything_core.envs.common import Check, Episode, ListsAnswers, Move, SpecError
from rlanything_core.envs.interface import Environment, TaskSpec
from rlanything_core.envs.rewriting import last_json_object
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rollout import step_limit

SAMPLE_TASKS = 4
"""Generated tasks the checks drive (fewer when the pool is smaller)."""
DEMO_EPISODES = 16
"""Episodes (env model: specs) each role's warm-start demonstrations are sampled from."""
JUNK_ANSWERS = (
    "",
    "I am not sure what to do.",
    "\\boxed{}",
    "\\boxed{999999}",
    "\\boxed{-1}",
    '{"action": null}',
    "```python\nraise SystemExit\n```",
    "\x00\ufffd" * 8,
)
"""Answers no environment should accept as a move, though a policy may write any of them."""
MALFORMED_SPECS: tuple[str | dict[str, object], ...] = ("not json", "[]", '{"', "null")
"""Spec inputs `parse_spec` must reject with `SpecError`."""
CONTRACT = "rlanything_core.envs.interface"


def _what(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def contract_checks(env: Environment, *, num_tasks: int, seed: int, max_steps: int) -> list[Check]:
    """The model-free checks of `env` on up to `SAMPLE_TASKS` tasks of its pool's generator
    (`seed`), episodes capped at `max_steps` (`environment.max_episode_steps`)."""
    n = min(SAMPLE_TASKS, num_tasks)
    try:
        specs = list(env.generate(env.pool_split, n, seed))
    except Exception as exc:
        problem = f"generate({env.pool_split!r}, {n}, {seed}) raised {_what(exc)}"
        return [Check("tasks generate", problem)]
    if len(specs) != n:
        return [Check("tasks generate", f"generate was asked for {n} tasks and gave {len(specs)}")]
    checks = [Check("tasks generate", None, f"{n} tasks of split {env.pool_split!r}")]
    checks.append(_round_trip(env, specs))
    checks.append(_bad_specs(env, specs[0]))
    checks.append(_episodes_end(env, specs, "random answers", _random_answers(seed), max_steps))
    checks.append(_episodes_end(env, specs, "junk answers", _junk_answers(), max_steps))
    checks.append(_rewrite_example(env, specs[0]))
    checks.extend(_extra_checks(env))
    return checks


def _extra_checks(env: Environment) -> list[Check]:
    """The environment's own checks (`Environment.extra_checks`); the loop does not rely on
    what they check, so `train` reports a failure and goes on."""
    try:
        extra = env.extra_checks()
    except Exception as exc:
        return [Check(f"{type(env).__name__}.extra_checks", f"it raised {_what(exc)}")]
    return [dataclasses.replace(c, absorbed=True) for c in extra]


def config_checks(config: RunConfig) -> list[Check]:
    """`contract_checks` of `config`'s environment, as `train` will draw and play its tasks."""
    env = config.environment
    return contract_checks(
        env.env, num_tasks=env.num_tasks, seed=env.seed, max_steps=env.max_episode_steps
    )


def _round_trip(env: Environment, specs: Sequence[TaskSpec]) -> Check:
    name = "specs round-trip (to_json, then parse_spec)"
    for i, spec in enumerate(specs):
        try:
            back = env.parse_spec(spec.to_json())
        except Exception as exc:
            return Check(name, f"parse_spec(to_json()) of generated task {i} raised {_what(exc)}")
        if back != spec:
            old, new = spec.model_dump(mode="json"), back.model_dump(mode="json")
            fields = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            return Check(
                name,
                f"task {i} comes back different (fields {', '.join(fields) or '(none)'}): "
                "to_json must write every field parse_spec reads, and the spec must compare "
                "by value (a frozen pydantic model does)",
            )
    return Check(name, None, f"{len(specs)} tasks")


def _bad_specs(env: Environment, spec: TaskSpec) -> Check:
    """Malformed input must raise SpecError; out-of-range fields must raise SpecError or give a
    valid spec, never another exception."""
    name = "bad specs raise SpecError"
    tried: list[tuple[str | dict[str, object], bool]] = [(m, True) for m in MALFORMED_SPECS]
    fields = spec.model_dump(mode="json")
    for key, value in fields.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            tried += [({**fields, key: bad}, False) for bad in (-(10**9), 10**9)]
        elif isinstance(value, str):
            tried.append(({**fields, key: ""}, False))
    tried.append(({**fields, "no_such_field": 1}, False))
    for data, must_raise in tried:
        shown = data if isinstance(data, str) else json.dumps(data)[:160]
        try:
            env.parse_spec(data)
        except SpecError:
            continue
        except Exception as exc:
            return Check(
                name,
                f"parse_spec({shown!r}) raised {type(exc).__name__}, not SpecError: catch it "
                "and raise rlanything_core.envs.common.SpecError naming the field "
                "(validate_spec does so for a pydantic model)",
                absorbed=True,
            )
        if must_raise:
            return Check(name, f"parse_spec({shown!r}) accepted malformed input; raise SpecError")
    return Check(name, None, f"{len(tried)} malformed or out-of-range specs")


AnswerSource = Callable[[Any, int], str]


def _random_answers(seed: int) -> AnswerSource:
    rng = random.Random(seed)

    def answer(episode: Any, _step: int) -> str:
        if isinstance(episode, ListsAnswers):
            listed = episode.answers()
            if listed:
                return rng.choice(listed)
        return f"\\boxed{{{rng.randint(1, 9)}}}"

    return answer


def _junk_answers() -> AnswerSource:
    return lambda _episode, step: JUNK_ANSWERS[step % len(JUNK_ANSWERS)]


EPISODE_MEMBERS = tuple(Episode.__annotations__)
"""The attributes the loop reads (the `Episode` protocol's)."""


def _episodes_end(
    env: Environment,
    specs: Sequence[TaskSpec],
    driven_by: str,
    answer: AnswerSource,
    max_steps: int,
) -> Check:
    """Each task's episode, answered by `answer`, ends (`done`) within its step limit."""
    name = f"episodes end within the step limit ({driven_by})"
    try:
        with env.session():
            for i, spec in enumerate(specs):
                limit = step_limit(spec, max_steps)
                episode = env.new_episode(spec, None, None)
                missing = [m for m in EPISODE_MEMBERS if not hasattr(episode, m)]
                if missing:
                    return Check(
                        name,
                        f"the episode of task {i} has no {', '.join(missing)}; the loop reads "
                        f"every member of {CONTRACT}.Episode",
                    )
                for step in range(limit):
                    if episode.done:
                        break
                    messages = episode.messages()
                    if not messages or not all({"role", "content"} <= set(m) for m in messages):
                        return Check(
                            name,
                            "messages() must return chat messages, dicts with role and content",
                        )
                    text = answer(episode, step)
                    try:
                        move = episode.act(text)
                    except Exception as exc:
                        return Check(
                            name,
                            f"act({text[:40]!r}) on task {i} raised {_what(exc)}: a malformed "
                            "answer is data; return Move(None, False, ...) for it",
                        )
                    if not isinstance(move, Move):
                        return Check(name, f"act returned {type(move).__name__}, not a Move")
                if not episode.done:
                    return Check(
                        name,
                        f"the episode of task {i} did not end within {limit} steps (the task's "
                        "max_steps or environment.max_episode_steps): set done once it reaches "
                        "its step limit; the loop cuts it there and counts it failed",
                        absorbed=True,
                    )
    except Exception as exc:
        return Check(name, f"playing a task raised {_what(exc)}")
    return Check(name, None, f"{len(specs)} episodes")


def _rewrite_example(env: Environment, spec: TaskSpec) -> Check:
    """The rewrite prompt's example is JSON of the spec's fields that makes a valid task."""
    name = "the rewrite example is a valid rewrite"
    try:
        example = env.rewrite_example(spec)
        keys = set(env.rewrite_keys(spec))
    except Exception as exc:
        return Check(name, f"rewrite_example or rewrite_keys raised {_what(exc)}")
    fields, error = last_json_object(example)
    if fields is None:
        return Check(name, f"rewrite_example gave {example!r}: {error}; return a JSON object")
    unknown = sorted(set(fields) - keys)
    if unknown:
        return Check(name, f"the example {example} sets {', '.join(unknown)}, not spec fields")
    try:
        _, error = env.parse_proposal(example, spec)
    except Exception as exc:
        return Check(name, f"parse_proposal of the example raised {_what(exc)}")
    if error is not None and "identical" not in error:
        return Check(name, f"the example {example} is not a valid task: {error}")
    return Check(name, None, example)


def demo_length_checks(config: RunConfig) -> list[Check]:
    """For each role whose warm start is on and which writes its answers: demonstrations
    sampled from `DEMO_EPISODES` episodes fit the role's `max_new_tokens` in its tokenizer
    (a longer answer teaches the model one it will be cut off writing)."""
    from rlanything_core.models.loading import load_tokenizer, resolve_source
    from rlanything_core.run.warm_start import warm_start_demos, warm_start_roles

    checks = []
    for role in warm_start_roles(config):
        settings = getattr(config, role)
        if getattr(settings, "answers", "generate") == "choose":
            continue  # chosen among listed answers, never generated
        ws = settings.warm_start.model_copy(
            update={"episodes": min(settings.warm_start.episodes, DEMO_EPISODES)}
        )
        name = f"{role} warm-start answers fit max_new_tokens"
        try:
            demos = warm_start_demos(config, role, ws)
            tokenizer = load_tokenizer(resolve_source(settings.model.source))
        except Exception as exc:
            checks.append(Check(name, f"making the demonstrations raised {_what(exc)}"))
            continue
        lengths = [len(tokenizer(d.answer, add_special_tokens=False)["input_ids"]) for d in demos]
        problem = answer_overflow(role, lengths, answer_limit(config, role))
        checks.append(Check(name, problem, f"{len(demos)} demonstrations"))
    return checks


def answer_limit(config: RunConfig, role: str) -> int:
    """The tokens `role` may generate for one answer (env model: its critiques' or its
    rewrites', whichever is larger, as its demonstrations hold both)."""
    if role == "env_model":
        em = config.env_model
        return max(em.model.max_new_tokens, em.critique_max_new_tokens)
    return int(getattr(config, role).model.max_new_tokens)


def answer_overflow(role: str, lengths: Sequence[int], limit: int) -> str | None:
    """What to change when some of `role`'s demonstration answers (`lengths`, in tokens) are
    longer than the `limit` it may generate; None when all fit."""
    over = [n for n in lengths if n > limit]
    if not over:
        return None
    setting = (
        "env_model.model.max_new_tokens or env_model.critique_max_new_tokens"
        if role == "env_model"
        else f"{role}.model.max_new_tokens"
    )
    return (
        f"{len(over)} of {len(lengths)} {role} warm-start answers are longer than the {limit} "
        f"tokens {setting} allows (the longest: {max(over)}), so the model would learn answers "
        f"it is cut off writing: raise it to {max(over)}, or shorten the environment's answers"
    )
