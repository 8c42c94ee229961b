"""TextWorld: text games generated locally by Microsoft's `textworld` package, behind the
environment interface.

A task spec holds the generation parameters (world size, number of objects, quest length, seed)
and the step limit, so the environment model adapts a task by changing them. The game file is
generated once per spec and cached under its spec hash (`cache_root()`); generation is
deterministic, so the same spec gives the same game on every machine. Validation generates the
game (or finds it in the cache) and plays its walkthrough to check that it is winnable within
the step limit.

The policy sees the game's feedback and its numbered admissible commands and answers with a
number in \\boxed{}, as in the household environment. The outcome is the game's won flag. A
step's ground-truth label: it took the next command of the game's remaining winning policy, or
otherwise shortened that policy (TextWorld recomputes it from the current state).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import shutil
import uuid
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlanything_core.base.atomic import entry_lock
from rlanything_core.base.paths import cache_root as project_cache
from rlanything_core.envs.common import SpecError, check_step_limit, validate_spec
from rlanything_core.envs.household.world import StepResult

MAX_WORLD_SIZE = 12
MAX_OBJECTS = 30
MAX_QUEST_LENGTH = 8
MAX_STEPS = 100
CACHE_ENV = "RLANYTHING_TEXTWORLD_CACHE"


class TextWorldSpec(BaseModel):
    """A TextWorld game. Difficulty knobs: world_size, nb_objects, quest_length, max_steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    world_size: int = Field(ge=1, le=MAX_WORLD_SIZE)
    """Rooms in the world, 1–12. More rooms mean more walking and searching."""
    nb_objects: int = Field(ge=1, le=MAX_OBJECTS)
    """Objects in the world besides the rooms, 1–30 (distractors and quest objects)."""
    quest_length: int = Field(ge=1, le=MAX_QUEST_LENGTH)
    """Length of the quest's winning command chain, 1–8."""
    max_steps: int = Field(ge=1, le=MAX_STEPS)
    """Step limit of an episode; must be at least the walkthrough's length."""
    seed: int = Field(ge=0, lt=2**31)
    """Seed of the game generator (map, objects, quest, text)."""

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)

    @property
    def generation(self) -> dict[str, int]:
        """The parameters the game file depends on (not the step limit)."""
        return self.model_dump(exclude={"max_steps"})

    @property
    def goal_text(self) -> str:
        return game_of(self).objective


def cache_root() -> Path:
    """Where games are cached: $RLANYTHING_TEXTWORLD_CACHE, else textworld/ in the project's
    cache ($RLANYTHING_CACHE, else ~/.cache/rlanything)."""
    return Path(os.environ.get(CACHE_ENV) or project_cache() / "textworld")


def spec_hash(spec: TextWorldSpec) -> str:
    """The cache key of a spec's game: its generation parameters and the textworld version."""
    import textworld

    key = json.dumps({**spec.generation, "textworld": textworld.__version__}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Game:
    """A generated, verified game in the cache."""

    path: Path
    """The compiled game file (.z8)."""
    objective: str
    walkthrough: tuple[str, ...]


def _clean_objective(text: str) -> str:
    return " ".join(text.split())


def _generate(spec: TextWorldSpec, out: Path) -> tuple[str, list[str]]:
    """Generate and compile the game of `spec` into `out`/game.z8; (objective, walkthrough)."""
    import textworld
    from textworld.generator import compile_game, make_game

    options = textworld.GameOptions()
    options.nb_rooms = spec.world_size
    options.nb_objects = spec.nb_objects
    options.quest_length = spec.quest_length
    options.seeds = spec.seed
    options.path = str(out / "game.z8")
    options.force_recompile = True
    try:
        game = make_game(options)
        compile_game(game, options)
    except Exception as exc:  # third-party generator on user-chosen parameters: a spec problem
        raise SpecError(
            f"TextWorld could not generate a game for {spec.generation}: "
            f"{type(exc).__name__}: {exc}. Use more objects or rooms for a longer quest, or "
            "another seed."
        ) from exc
    if not game.walkthrough:
        raise SpecError(
            f"TextWorld generated a game without a quest for {spec.generation}; raise "
            "quest_length or nb_objects, or choose another seed."
        )
    return _clean_objective(game.objective), list(game.walkthrough)


def start_game(path: Path, wrappers: Sequence[Any] = (), **infos: bool) -> tuple[Any, Any]:
    """A TextWorld environment on a game file (TextWorld's own, or ALFWorld's PDDL games),
    asking for `infos`, and its first state. TextWorld tracks the quest itself, so jericho's
    warning that it has no score tables for a generated game is noise."""
    import textworld
    from jericho.jericho import UnsupportedGameWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsupportedGameWarning)
        env = textworld.start(
            str(path), request_infos=textworld.EnvInfos(**infos), wrappers=list(wrappers)
        )
        return env, env.reset()


def _verify(path: Path, walkthrough: list[str]) -> None:
    """Play the walkthrough; SpecError unless it wins the game."""
    env, _ = start_game(path, won=True)
    try:
        state = None
        for command in walkthrough:
            state, _, done = env.step(command)
            if done:
                break
    finally:
        env.close()
    if state is None or not state.won:
        raise SpecError(
            f"the generated game {path} is not won by its walkthrough {walkthrough}; choose "
            "another seed."
        )


@lru_cache(maxsize=512)
def _load(root: str, key: str) -> Game:
    folder = Path(root) / key
    meta = json.loads((folder / "meta.json").read_text())
    return Game(folder / "game.z8", meta["objective"], tuple(meta["walkthrough"]))


def game_of(spec: TextWorldSpec) -> Game:
    """The spec's game from the cache, generated and verified first when missing; when another
    process is generating it, waits for that one (`claim_game` does not wait)."""
    game = _build(spec, wait=True)
    assert game is not None  # a waiting build always ends with the game or a SpecError
    return game


def claim_game(spec: TextWorldSpec) -> Game | None:
    """The spec's game when it is cached or this process can generate it now; None while another
    process is generating it (then `game_of` waits for it). Lets processes that need the same
    games split the work between them (`generate_textworld_specs`)."""
    return _build(spec, wait=False)


def _build(spec: TextWorldSpec, wait: bool) -> Game | None:
    """The game from the cache, or generated under the spec's lock.

    The lock (`flock` on a file beside the cache entry, released if its holder dies) only spares
    duplicate work. Safety comes from the rename: the game is generated in a temporary directory
    beside its cache entry, played through, and renamed into place only then, so an interrupted
    generation leaves no entry and two processes generating the same game keep one of the two
    identical results.
    """
    root, key = cache_root(), spec_hash(spec)
    folder = root / key
    if not (folder / "meta.json").is_file():
        with entry_lock(folder, wait) as held:
            if not held:
                return None
            if not (folder / "meta.json").is_file():  # not made while this one waited
                _generate_into(spec, root, key)
    try:
        return _load(str(root), key)
    except (OSError, ValueError, KeyError) as exc:
        raise SpecError(
            f"the cached TextWorld game {folder} is unreadable ({exc}); delete that "
            "directory and it is generated again."
        ) from exc


def _generate_into(spec: TextWorldSpec, root: Path, key: str) -> None:
    tmp = root / f".{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        objective, walkthrough = _generate(spec, tmp)
        _verify(tmp / "game.z8", walkthrough)
        meta = {"spec": spec.generation, "objective": objective, "walkthrough": walkthrough}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        try:
            os.rename(tmp, root / key)
        except OSError:
            if not (root / key / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parse_textworld_spec(data: str | dict[str, object]) -> TextWorldSpec:
    """Validate a spec completely: its fields, then its game (generated when not cached), which
    must be won by its walkthrough within max_steps. Raises SpecError naming the problem."""
    spec = validate_spec(TextWorldSpec, data, "textworld")
    walkthrough = game_of(spec).walkthrough
    check_step_limit(spec.max_steps, len(walkthrough), f"the walkthrough of {spec.generation}")
    return spec


def _feedback(text: str) -> str:
    """The game's text on one line, cut at its command prompt ('>', followed by the status
    bar)."""
    kept: list[str] = []
    for line in (raw.strip() for raw in text.splitlines()):
        if line.startswith(">"):
            break
        if line:
            kept.append(line)
    return " ".join(kept) or "Nothing happens."


class GameEpisode:
    """One episode of a game on TextWorld's engine (the household episode's interface): `step`
    until done. The expert is the game's winning policy, which TextWorld replans from the
    current state."""

    def __init__(self, env: Any, state: Any, objective: str, max_steps: int) -> None:
        self._env, self._state = env, state
        self.goal_text = objective
        self.max_steps = max_steps
        self.steps_taken = 0
        self.done = False
        self.success = False
        self.observation = _feedback(state.description or state.feedback)

    @property
    def actions(self) -> list[str]:
        return list(self._state.admissible_commands)

    def _remaining(self) -> list[str]:
        return list(self._state.policy_commands or [])

    def expert_action(self) -> str:
        """The next command of the game's winning policy from the current state."""
        return self._remaining()[0]

    def step(self, action_index: int | None) -> StepResult:
        """Take the command with this 0-based index of `actions`; None is an invalid answer,
        which uses up a step and changes nothing."""
        if self.done:
            raise RuntimeError("episode is over; start a new one")
        actions, before = self.actions, self._remaining()
        valid = action_index is not None and 0 <= action_index < len(actions)
        progress = False
        if valid:
            assert action_index is not None
            command = actions[action_index]
            self._state, _, _ = self._env.step(command)
            after = self._remaining()
            progress = (
                bool(self._state.won)
                or (bool(before) and command == before[0])
                or len(after) < len(before)
            )
            observation = _feedback(self._state.feedback)
        else:
            observation = "Nothing happens."
        self.steps_taken += 1
        self.success = bool(self._state.won)
        self.done = self.success or bool(self._state.lost) or self.steps_taken >= self.max_steps
        self.observation = observation
        if self.done:
            self._env.close()
        return StepResult(observation, valid, progress, self.done, self.success)


class TextWorldEpisode(GameEpisode):
    """One episode of a TextWorld task's game."""

    def __init__(self, spec: TextWorldSpec) -> None:
        self.spec = spec
        self.game = game_of(spec)
        env, state = start_game(
            self.game.path,
            admissible_commands=True,
            policy_commands=True,
            won=True,
            lost=True,
            description=True,
        )
        super().__init__(env, state, self.game.objective, spec.max_steps)


_SPLITS: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    # world_size, nb_objects, quest_length ranges (inclusive)
    "id": ((1, 3), (2, 6), (1, 3)),
    "ood": ((5, 8), (6, 12), (4, 6)),
}


def textworld_drafts(split: Literal["id", "ood"], seed: int) -> Iterator[TextWorldSpec]:
    """The candidate specs `generate_textworld_specs(split, ·, seed)` tries, in its order, without
    generating their games (so a cache can be filled ahead of a run). The draw is seeded by
    `(split, seed)` alone: the first k drafts are the same whatever `n` the caller asks for."""
    rng = random.Random(f"textworld-{split}-{seed}")
    rooms, objects, quest = _SPLITS[split]
    while True:
        yield TextWorldSpec(
            world_size=rng.randint(*rooms),
            nb_objects=rng.randint(*objects),
            quest_length=rng.randint(*quest),
            max_steps=MAX_STEPS,
            seed=rng.randrange(2**31),
        )


def generate_textworld_specs(
    split: Literal["id", "ood"], n: int, seed: int, step_slack: int = 6
) -> list[TextWorldSpec]:
    """`n` valid specs (their games generated and cached). "id": 1–3 rooms, 2–6 objects, quests
    of 1–3 commands; "ood": 5–8 rooms, 6–12 objects, quests of 4–6 commands. max_steps is the
    walkthrough's length plus `step_slack`. At most `4n + 8` drafts are tried.

    The specs are the first `n` drafts of `textworld_drafts` whose games can be made, whoever
    makes them: a draft another process is generating is passed over and waited for only once
    enough drafts are in hand, so processes that need the same specs (an ablation's runs side by
    side) generate different games instead of the same ones twice."""
    drafts = list(itertools.islice(textworld_drafts(split, seed), 4 * n + 8))
    games: dict[int, Game] = {}  # draft index -> its game
    errors: dict[int, str] = {}  # draft index -> why its game cannot be made
    passed: list[int] = []  # drafts another process held when this one came to them
    walked = 0

    def settle(index: int, wait: bool) -> None:
        try:
            game = _build(drafts[index], wait)
        except SpecError as exc:
            errors[index] = str(exc)
            return
        if game is None:
            passed.append(index)
        else:
            games[index] = game

    while True:
        while walked < len(drafts) and len(games) + len(passed) < n:
            settle(walked, wait=False)
            walked += 1
        if not passed:
            break
        settle(passed.pop(0), wait=True)
    specs = [
        drafts[i].model_copy(
            update={"max_steps": min(len(games[i].walkthrough) + step_slack, MAX_STEPS)}
        )
        for i in sorted(games)
    ]
    if len(specs) < n:
        raise SpecError(
            f"only {len(specs)} of {n} TextWorld {split} games could be generated; the last "
            f"error: {errors[max(errors)] if errors else 'none'}"
        )
    return specs
