"""A household text environment in the style of ALFWorld, generated from a JSON task spec.

The agent moves between rooms and receptacles, opens containers, picks objects up (one at a time),
cleans them at a sink basin, heats them in a microwave, cools them in a fridge and puts them down.
Each step offers a numbered list of admissible actions; the policy answers `\\boxed{number}`.
The outcome is +1 when the goal holds, −1 at the step limit.

An expert planner knows the whole state. It gives the optimal action in any state and the length
d(s) of the shortest plan; a step *makes progress* when d(s') < d(s). These labels are the ground
truth for the reward model's process accuracy.

Differences from ALFWorld, on purpose:
1. Worlds are generated from a small spec (rooms, distractors, goal type, step limit, a layout
   seed), so the environment model adapts a task by editing a few JSON fields.
2. Houses have several rooms: "go to <room>" moves between rooms, "go to <receptacle>" within one.
   A room's description shows what lies on its open receptacles; closed ones must be opened.
3. Heating, cooling and cleaning work on any held object; the goal checks the object type.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from rlanything_core.envs.common import SpecError, check_step_limit, validate_spec

GoalType = Literal["put", "clean_put", "heat_put", "cool_put", "find_two"]
GOAL_TYPES: tuple[GoalType, ...] = ("put", "clean_put", "heat_put", "cool_put", "find_two")

# Object type → processes it affords (the goal types it can appear in beyond "put"/"find_two").
OBJECT_AFFORDANCES: dict[str, frozenset[str]] = {
    "apple": frozenset({"clean", "heat", "cool"}),
    "potato": frozenset({"clean", "heat", "cool"}),
    "tomato": frozenset({"clean", "heat", "cool"}),
    "egg": frozenset({"heat", "cool"}),
    "bread": frozenset({"heat", "cool"}),
    "mug": frozenset({"clean", "heat", "cool"}),
    "cup": frozenset({"clean", "heat", "cool"}),
    "bowl": frozenset({"clean", "heat", "cool"}),
    "plate": frozenset({"clean", "cool"}),
    "knife": frozenset({"clean"}),
    "spoon": frozenset({"clean"}),
    "fork": frozenset({"clean"}),
    "book": frozenset(),
    "pen": frozenset(),
    "keychain": frozenset(),
    "remotecontrol": frozenset(),
    "cellphone": frozenset(),
    "candle": frozenset(),
}

OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "dresser", "safe"})
ROOM_RECEPTACLES: dict[str, tuple[str, ...]] = {
    "kitchen": (
        "countertop",
        "countertop",
        "cabinet",
        "cabinet",
        "drawer",
        "fridge",
        "microwave",
        "sinkbasin",
        "diningtable",
        "garbagecan",
    ),
    "livingroom": ("sofa", "coffeetable", "shelf", "sidetable", "drawer", "armchair"),
    "bedroom": ("bed", "dresser", "desk", "shelf", "sidetable", "drawer"),
    "bathroom": ("sinkbasin", "cabinet", "countertop", "shelf", "garbagecan"),
    "office": ("desk", "shelf", "drawer", "safe", "sidetable"),
}
ROOMS: tuple[str, ...] = tuple(ROOM_RECEPTACLES)
RECEPTACLE_KINDS: tuple[str, ...] = tuple(sorted({k for r in ROOM_RECEPTACLES.values() for k in r}))

# Goal type → (process the object needs, appliance that performs it, state word).
_PROCESS: dict[str, tuple[str, str, str]] = {
    "clean_put": ("clean", "sinkbasin", "clean"),
    "heat_put": ("heat", "microwave", "hot"),
    "cool_put": ("cool", "fridge", "cool"),
}
_GOAL_TEMPLATE = {
    "put": "put a {obj} in {target}",
    "clean_put": "put a clean {obj} in {target}",
    "heat_put": "put a hot {obj} in {target}",
    "cool_put": "put a cool {obj} in {target}",
    "find_two": "find two {obj} and put them in {target}",
}

MAX_ROOMS = len(ROOMS)
MAX_DISTRACTORS = 20
MAX_STEPS = 100
MAX_COUNT = 3
_COUNT_WORDS = {2: "two", 3: "three"}
_PLURALS = {"knife": "knives", "potato": "potatoes", "tomato": "tomatoes"}


class HouseholdSpec(BaseModel):
    """A household task. Difficulty knobs: num_rooms, num_distractors, goal_type, max_steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal_type: GoalType
    """What to achieve: put | clean_put | heat_put | cool_put | find_two."""
    object: str
    """Object type to move, one of OBJECT_AFFORDANCES (e.g. "apple")."""
    target: str
    """Receptacle kind to put it in, one of RECEPTACLE_KINDS (e.g. "countertop")."""
    num_rooms: int = Field(ge=1, le=MAX_ROOMS)
    """Rooms in the house, 1–5. More rooms mean more places to search."""
    num_distractors: int = Field(ge=0, le=MAX_DISTRACTORS)
    """Objects of other types scattered around, 0–20."""
    max_steps: int = Field(ge=1, le=MAX_STEPS)
    """Step limit of an episode; must be at least the expert's plan length."""
    layout_seed: int = Field(ge=0, lt=2**31)
    """Seed of the procedural layout (which rooms, where things are)."""
    count: int = Field(default=1, ge=1, le=MAX_COUNT)
    """How many objects of the type to deliver (each processed if the goal asks), 1-3: each one
    adds a fetch, a process and a delivery to the plan (long tasks). find_two always needs two."""

    @model_serializer(mode="wrap")
    def _omit_single_count(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # count 1 is left out, so single-object specs keep the JSON (and task ids) they had.
        data: dict[str, Any] = handler(self)
        if self.count == 1:
            data.pop("count", None)
        return data

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)

    @property
    def goal_objects(self) -> int:
        """Objects the goal needs delivered."""
        return 2 if self.goal_type == "find_two" else self.count

    @property
    def goal_text(self) -> str:
        template, obj = _GOAL_TEMPLATE[self.goal_type], self.object
        if self.count > 1:
            template = template.replace("put a ", f"put {_COUNT_WORDS[self.count]} ", 1)
            obj = _PLURALS.get(obj, f"{obj}s")
        return template.format(obj=obj, target=self.target)


def parse_spec(data: str | dict[str, object]) -> HouseholdSpec:
    """Validate a spec (JSON text or dict) completely, including solvability within max_steps.

    Raises SpecError with a message that names the field and the fix.
    """
    spec = validate_spec(HouseholdSpec, data, "household")
    _check_semantics(spec)
    world = build_world(spec)
    check_step_limit(spec.max_steps, len(plan(world)), "the expert's plan for this layout")
    return spec


def _check_semantics(spec: HouseholdSpec) -> None:
    if spec.goal_type == "find_two" and spec.count != 1:
        raise SpecError(
            f"count={spec.count} does not apply to goal_type='find_two', which always needs two; "
            "leave count out, or use goal_type 'put' with count 2 or 3."
        )
    if spec.object not in OBJECT_AFFORDANCES:
        raise SpecError(
            f"object={spec.object!r} is not a known object type; use one of "
            f"{sorted(OBJECT_AFFORDANCES)}."
        )
    if spec.target not in RECEPTACLE_KINDS:
        raise SpecError(
            f"target={spec.target!r} is not a known receptacle kind; use one of "
            f"{list(RECEPTACLE_KINDS)}."
        )
    if spec.goal_type in _PROCESS:
        process, appliance, _ = _PROCESS[spec.goal_type]
        if process not in OBJECT_AFFORDANCES[spec.object]:
            able = sorted(o for o, a in OBJECT_AFFORDANCES.items() if process in a)
            raise SpecError(
                f"goal_type={spec.goal_type!r} needs an object that can be {process}ed; "
                f"{spec.object!r} cannot. Use one of {able}."
            )
        if spec.target == appliance:
            raise SpecError(
                f"target={spec.target!r} is the appliance of goal_type={spec.goal_type!r}; "
                "choose another target."
            )
    needed = len(_required_rooms(spec, random.Random(spec.layout_seed)))
    if needed > spec.num_rooms:
        raise SpecError(
            f"num_rooms={spec.num_rooms} cannot hold the target and the appliance this goal "
            f"needs; set num_rooms to at least {needed}."
        )


def _required_rooms(spec: HouseholdSpec, rng: random.Random) -> list[str]:
    order = list(ROOMS)
    rng.shuffle(order)
    kinds = [spec.target]
    if spec.goal_type in _PROCESS:
        kinds.append(_PROCESS[spec.goal_type][1])
    for room in order:  # one room that has everything, when there is one
        if all(kind in ROOM_RECEPTACLES[room] for kind in kinds):
            return [room]
    required: list[str] = []
    for kind in kinds:
        if not any(kind in ROOM_RECEPTACLES[r] for r in required):
            required.append(next(r for r in order if kind in ROOM_RECEPTACLES[r]))
    return required


@dataclass
class World:
    """The full state of one household episode."""

    rooms: dict[str, list[str]]  # room → receptacle names
    room_of: dict[str, str]  # receptacle → room
    kind_of: dict[str, str]  # receptacle or object name → kind
    is_open: dict[str, bool]  # openable receptacle → open?
    contents: dict[str, list[str]]  # receptacle → objects in/on it
    states: dict[str, set[str]]  # object → {"clean", "hot", "cool"}
    goal_type: str
    goal_object: str
    goal_target: str
    agent_room: str
    agent_at: str | None = None
    holding: str | None = None
    goal_count: int = 1  # objects to deliver

    def copy(self) -> World:
        return World(
            rooms=self.rooms,
            room_of=self.room_of,
            kind_of=self.kind_of,
            is_open=dict(self.is_open),
            contents={k: list(v) for k, v in self.contents.items()},
            states={k: set(v) for k, v in self.states.items()},
            goal_type=self.goal_type,
            goal_object=self.goal_object,
            goal_target=self.goal_target,
            agent_room=self.agent_room,
            agent_at=self.agent_at,
            holding=self.holding,
            goal_count=self.goal_count,
        )

    def satisfies(self, obj: str) -> bool:
        """Is `obj` placed in a target receptacle in the state the goal asks for?"""
        if self.kind_of[obj] != self.goal_object or obj == self.holding:
            return False
        rec = self.location(obj)
        if rec is None or self.kind_of[rec] != self.goal_target:
            return False
        return self.goal_type not in _PROCESS or _PROCESS[self.goal_type][2] in self.states[obj]

    def location(self, obj: str) -> str | None:
        for rec, objs in self.contents.items():
            if obj in objs:
                return rec
        return None

    def goal_reached(self) -> bool:
        return sum(self.satisfies(o) for o in self.states) >= self.goal_count

    def accessible(self, rec: str) -> bool:
        return self.is_open.get(rec, True)


def build_world(spec: HouseholdSpec) -> World:
    """Lay out the house deterministically from the spec (same spec → same world)."""
    _check_semantics(spec)
    rng = random.Random(spec.layout_seed)
    required = _required_rooms(spec, rng)
    others = [r for r in ROOMS if r not in required]
    rng.shuffle(others)
    room_names = required + others[: spec.num_rooms - len(required)]
    rng.shuffle(room_names)

    counters: dict[str, int] = {}
    rooms: dict[str, list[str]] = {}
    room_of: dict[str, str] = {}
    kind_of: dict[str, str] = {}
    for room in room_names:
        rooms[room] = []
        for kind in ROOM_RECEPTACLES[room]:
            counters[kind] = counters.get(kind, 0) + 1
            name = f"{kind} {counters[kind]}"
            rooms[room].append(name)
            room_of[name] = room
            kind_of[name] = kind
    receptacles = list(room_of)
    is_open = {r: False for r in receptacles if kind_of[r] in OPENABLE}
    contents: dict[str, list[str]] = {r: [] for r in receptacles}
    states: dict[str, set[str]] = {}

    obj_counters: dict[str, int] = {}

    def place(obj_kind: str, allowed: list[str]) -> None:
        obj_counters[obj_kind] = obj_counters.get(obj_kind, 0) + 1
        name = f"{obj_kind} {obj_counters[obj_kind]}"
        kind_of[name] = obj_kind
        states[name] = set()
        contents[rng.choice(allowed)].append(name)

    # Goal objects never start in a target receptacle (nor, for processing goals, in the appliance).
    avoid = {spec.target}
    if spec.goal_type in _PROCESS:
        avoid.add(_PROCESS[spec.goal_type][1])
    sources = [r for r in receptacles if kind_of[r] not in avoid]
    for _ in range(spec.goal_objects):
        place(spec.object, sources)
    distractor_kinds = [k for k in OBJECT_AFFORDANCES if k != spec.object]
    for _ in range(spec.num_distractors):
        place(rng.choice(distractor_kinds), receptacles)
    for objs in contents.values():
        objs.sort()
    return World(
        rooms=rooms,
        room_of=room_of,
        kind_of=kind_of,
        is_open=is_open,
        contents=contents,
        states=states,
        goal_type=spec.goal_type,
        goal_object=spec.object,
        goal_target=spec.target,
        agent_room=room_names[0],
        goal_count=spec.goal_objects,
    )


# --------------------------------------------------------------------------------------------
# Actions


def admissible_actions(w: World) -> list[str]:
    """The actions that do something in state `w`, in a stable order."""
    acts = ["look", "inventory"]
    acts += [f"go to {room}" for room in w.rooms if room != w.agent_room]
    acts += [f"go to {rec}" for rec in w.rooms[w.agent_room] if rec != w.agent_at]
    rec = w.agent_at
    if rec is not None:
        if rec in w.is_open:
            acts.append(f"close {rec}" if w.is_open[rec] else f"open {rec}")
        if w.accessible(rec):
            if w.holding is None:
                acts += [f"take {obj} from {rec}" for obj in w.contents[rec]]
            else:
                acts.append(f"put {w.holding} in/on {rec}")
        if w.holding is not None:
            verb = {"sinkbasin": "clean", "microwave": "heat", "fridge": "cool"}.get(w.kind_of[rec])
            if verb is not None:
                acts.append(f"{verb} {w.holding} with {rec}")
    return acts


def _describe_location(w: World) -> str:
    if w.agent_at is None:
        seen = ", ".join(_glance(w, rec) for rec in w.rooms[w.agent_room])
        return f"You are in the {w.agent_room}. Here you see: {seen}."
    rec = w.agent_at
    if not w.accessible(rec):
        return f"You are at {rec}. The {rec} is closed."
    return f"You are at {rec}. {_contents_text(w, rec)}"


def _glance(w: World, rec: str) -> str:
    """A receptacle as seen from across the room: what lies on it, unless it is closed."""
    if not w.accessible(rec):
        return f"{rec} (closed)"
    objs = w.contents[rec]
    return f"{rec} ({', '.join(objs) if objs else 'empty'})"


def _contents_text(w: World, rec: str) -> str:
    objs = w.contents[rec]
    seen = ", ".join(objs) if objs else "nothing"
    return f"In/on the {rec}, you see {seen}."


def apply_action(w: World, action: str) -> str:
    """Apply an admissible action to `w` in place and return the observation it produces."""
    if action == "look":
        return _describe_location(w)
    if action == "inventory":
        return f"You are carrying: {w.holding}." if w.holding else "You are not carrying anything."
    verb, _, rest = action.partition(" ")
    if verb == "go":
        dest = rest.removeprefix("to ")
        if dest in w.rooms:
            w.agent_room, w.agent_at = dest, None
            return _describe_location(w)
        w.agent_at = dest
        if not w.accessible(dest):
            return f"You arrive at {dest}. The {dest} is closed."
        return f"You arrive at {dest}. {_contents_text(w, dest)}"
    if verb in ("open", "close"):
        w.is_open[rest] = verb == "open"
        if verb == "close":
            return f"You close the {rest}."
        return f"You open the {rest}. {_contents_text(w, rest)}"
    if verb == "take":
        obj, _, rec = rest.partition(" from ")
        w.contents[rec].remove(obj)
        w.holding = obj
        return f"You pick up the {obj} from the {rec}."
    if verb == "put":
        obj, _, rec = rest.partition(" in/on ")
        w.contents[rec].append(obj)
        w.contents[rec].sort()
        w.holding = None
        return f"You put the {obj} in/on the {rec}."
    obj, _, rec = rest.partition(" with ")
    state = {"clean": "clean", "heat": "hot", "cool": "cool"}[verb]
    w.states[obj].add(state)
    if state == "hot":
        w.states[obj].discard("cool")
    if state == "cool":
        w.states[obj].discard("hot")
    return f"You {verb} the {obj} using the {rec}. The {obj} is now {state}."


# --------------------------------------------------------------------------------------------
# Expert planner


@dataclass
class _Sim:
    """Agent position and opened receptacles while a candidate plan is laid out."""

    room: str
    at: str | None
    opened: set[str]
    actions: list[str] = field(default_factory=list)

    def visit(self, w: World, rec: str, need_open: bool) -> None:
        if self.at != rec:
            if w.room_of[rec] != self.room:
                self.room = w.room_of[rec]
                self.actions.append(f"go to {self.room}")
            self.actions.append(f"go to {rec}")
            self.at = rec
        if need_open and rec in w.is_open and rec not in self.opened:
            self.actions.append(f"open {rec}")
            self.opened.add(rec)


def plan(w: World) -> list[str]:
    """A shortest action sequence that reaches the goal from `w` (the expert planner).

    Plans have the form [drop a held non-goal object] then, per object still needed:
    fetch it (go, open, take) → process it if the goal asks (go to the appliance, act) → deliver it
    (go, open, put). Closing, looking and detours never shorten a plan, so enumerating the object
    order and the choice of appliance, target and drop place covers every optimal plan.
    """
    if w.goal_reached():
        return []
    process = _PROCESS.get(w.goal_type)
    appliances = (
        [r for r in w.room_of if w.kind_of[r] == process[1]] if process is not None else [None]
    )
    targets = [r for r in w.room_of if w.kind_of[r] == w.goal_target]
    missing = w.goal_count - sum(w.satisfies(o) for o in w.states)
    held = w.holding
    held_is_goal = held is not None and w.kind_of[held] == w.goal_object
    free = [
        o for o in w.states if w.kind_of[o] == w.goal_object and not w.satisfies(o) and o != held
    ]
    opened = {r for r, is_open in w.is_open.items() if is_open}

    if held is not None and not held_is_goal:
        drop_places = set(w.rooms[w.agent_room])
        for o in free:
            drop_places.add(w.location(o) or "")
        drop_places |= set(targets) | {a for a in appliances if a}
        drop_places.discard("")
        drops: list[str | None] = list(sorted(drop_places))
    else:
        drops = [None]

    best: list[str] | None = None
    for drop in drops:
        orders: list[tuple[str, ...]] = []
        if held_is_goal:
            assert held is not None
            orders = [(held, *rest) for rest in itertools.permutations(free, missing - 1)]
        else:
            orders = list(itertools.permutations(free, missing))
        for order in orders:
            n = len(order)
            for tools, places in itertools.product(
                itertools.product(appliances, repeat=n), itertools.product(targets, repeat=n)
            ):
                sim = _Sim(room=w.agent_room, at=w.agent_at, opened=set(opened))
                if drop is not None:
                    assert held is not None
                    sim.visit(w, drop, need_open=True)
                    sim.actions.append(f"put {held} in/on {drop}")
                for k, obj in enumerate(order):
                    appliance, target = tools[k], places[k]
                    if obj != held:
                        src = w.location(obj)
                        assert src is not None
                        sim.visit(w, src, need_open=True)
                        sim.actions.append(f"take {obj} from {src}")
                    if process is not None and process[2] not in w.states[obj]:
                        assert appliance is not None
                        sim.visit(w, appliance, need_open=False)
                        sim.actions.append(f"{process[0]} {obj} with {appliance}")
                    sim.visit(w, target, need_open=True)
                    sim.actions.append(f"put {obj} in/on {target}")
                if best is None or len(sim.actions) < len(best):
                    best = sim.actions
    if best is None:
        raise RuntimeError("unreachable goal: not enough goal objects in the world")
    return best


# --------------------------------------------------------------------------------------------
# Episodes


@dataclass(frozen=True)
class StepResult:
    """What one step of an episode produced."""

    observation: str
    valid: bool  # the answer named an admissible action
    progress: bool  # ground truth: the expert's distance to the goal went down
    done: bool
    success: bool


class HouseholdEpisode:
    """One episode of a household task: reset on construction, then `step` until done."""

    def __init__(self, spec: HouseholdSpec) -> None:
        self.spec = spec
        self.world = build_world(spec)
        self.steps_taken = 0
        self.done = False
        self.success = False
        self._distance = len(plan(self.world))
        self.observation = (
            f"You are in a house with these rooms: {', '.join(self.world.rooms)}. "
            f"{_describe_location(self.world)}"
        )

    @property
    def goal_text(self) -> str:
        return self.spec.goal_text

    @property
    def actions(self) -> list[str]:
        return admissible_actions(self.world)

    def expert_action(self) -> str:
        """The first action of a shortest plan from the current state."""
        return plan(self.world)[0]

    def step(self, action_index: int | None) -> StepResult:
        """Take the action with this 0-based index of `actions`; None is an invalid answer.

        An invalid answer uses up a step and changes nothing ("Nothing happens.").
        """
        if self.done:
            raise RuntimeError("episode is over; start a new HouseholdEpisode")
        actions = self.actions
        valid = action_index is not None and 0 <= action_index < len(actions)
        if valid:
            assert action_index is not None
            observation = apply_action(self.world, actions[action_index])
        else:
            observation = "Nothing happens."
        self.steps_taken += 1
        distance = len(plan(self.world))
        progress = distance < self._distance
        self._distance = distance
        self.success = self.world.goal_reached()
        self.done = self.success or self.steps_taken >= self.spec.max_steps
        self.observation = observation
        return StepResult(observation, valid, progress, self.done, self.success)


# --------------------------------------------------------------------------------------------
# Task generators

ID_GOALS: tuple[GoalType, ...] = ("put", "clean_put", "heat_put")
OOD_GOALS: tuple[GoalType, ...] = ("cool_put", "find_two")
_ID_TARGETS = ("countertop", "cabinet", "diningtable", "shelf", "drawer", "sidetable", "desk")
_OOD_TARGETS = ("coffeetable", "dresser", "sofa", "bed", "armchair", "garbagecan")


def generate_specs(
    split: Literal["id", "ood"],
    n: int,
    seed: int,
    step_slack: int = 6,
    *,
    goals: Sequence[GoalType] | None = None,
    num_rooms: tuple[int, int] | None = None,
    num_distractors: tuple[int, int] | None = None,
    count: tuple[int, int] | None = None,
    targets: Sequence[str] | None = None,
) -> list[HouseholdSpec]:
    """`n` valid task specs.

    "id" (in-domain): put / clean / heat goals, 1–2 rooms, 0–4 distractors, common targets.
    "ood" (out-of-domain): cool / find-two goals, 3–4 rooms, 2–6 distractors, targets never used
    in-domain. `goals`, `num_rooms`, `num_distractors` and `targets` replace the split's goal
    types, (inclusive) ranges and target receptacle kinds. `count` draws how many objects each
    goal (but find_two) asks for, from an inclusive range within [1, 3]; None = one.
    max_steps is the expert's plan length plus `step_slack`.
    """
    rng = random.Random(f"household-{split}-{seed}")
    goals_, targets_, rooms, distractors = (
        (ID_GOALS, _ID_TARGETS, (1, 2), (0, 4))
        if split == "id"
        else (OOD_GOALS, _OOD_TARGETS, (3, 4), (2, 6))
    )
    goals, rooms, distractors = goals or goals_, num_rooms or rooms, num_distractors or distractors
    targets = targets or targets_
    unknown = sorted(set(targets) - set(RECEPTACLE_KINDS))
    if unknown:
        raise SpecError(
            f"unknown target receptacles {unknown}; choose from {list(RECEPTACLE_KINDS)}."
        )
    for name, (low, high), bottom, top in (
        ("num_rooms", rooms, 1, MAX_ROOMS),
        ("num_distractors", distractors, 0, MAX_DISTRACTORS),
        ("count", count or (1, 1), 1, MAX_COUNT),
    ):
        if not bottom <= low <= high <= top:
            raise SpecError(
                f"{name} range {[low, high]} is invalid; use [low, high] within "
                f"[{bottom}, {top}] with low <= high."
            )
    specs: list[HouseholdSpec] = []
    for _ in range(100 * n + 1000):
        if len(specs) == n:
            break
        goal = rng.choice(goals)
        process = _PROCESS.get(goal)
        objects = [o for o, a in OBJECT_AFFORDANCES.items() if process is None or process[0] in a]
        draft = {
            "goal_type": goal,
            "object": rng.choice(sorted(objects)),
            "target": rng.choice(targets),
            "num_rooms": rng.randint(*rooms),
            "num_distractors": rng.randint(*distractors),
            "max_steps": MAX_STEPS,
            "layout_seed": rng.randrange(2**31),
        }
        if count is not None and goal != "find_two":
            draft["count"] = rng.randint(*count)
        try:
            spec = parse_spec(draft)
        except SpecError:
            continue  # e.g. too few rooms for target + appliance: draw again
        optimal = len(plan(build_world(spec)))
        specs.append(spec.model_copy(update={"max_steps": optimal + step_slack}))
    if len(specs) < n:
        raise SpecError(
            f"only {len(specs)} of {n} {split} tasks could be drawn with num_rooms {list(rooms)} "
            f"and num_distractors {list(distractors)}; widen the ranges (goals that need an "
            "appliance room besides the target's need more rooms)."
        )
    return specs
