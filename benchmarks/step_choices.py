"""Which decisions does a policy get right? Replays held-out household or TextWorld episodes.

    python benchmarks/step_choices.py --config configs/learning-household.yaml \
        RUN_DIR/eval/step_000/id_rollouts.parquet RUN_DIR/eval/step_008/id_rollouts.parquet

Each step of each episode in the rollouts file is replayed on the task (the eval's in-domain
task set, `flows.evaluate.eval_tasks` of the config) and classed by the expert's
action at that state (the household planner's, or the TextWorld game's walkthrough). Household
classes: going to a receptacle where the goal object lies in sight ("go-seen") or hidden
("go-hidden"), going to the target while holding the object ("go-target"), going to another
room, opening, taking, putting; TextWorld classes: the command's verb. For each class it prints
how often the policy chose the expert's action (with its 95 % interval clustered by task), how
often its answer was invalid, and how often
a uniform pick would have chosen the expert's action: among the admissible "go to" actions for
the household's go classes (where a policy that cannot tell the receptacles apart sits), among
all admissible commands in TextWorld.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import pandas as pd

from rlanything_core.envs.demos import TextGame
from rlanything_core.envs.household.world import HouseholdEpisode
from rlanything_core.envs.interface import TaskSpec
from rlanything_core.envs.text import TextEnvironment
from rlanything_core.method.stats import accuracy
from rlanything_core.run.config import load_config
from rlanything_flows.evaluate import eval_tasks


def step_class(episode: TextGame, expert: str) -> str:
    """The kind of decision the expert's action `expert` is at the episode's current state."""
    verb = expert.split()[0]
    if verb != "go" or not isinstance(episode, HouseholdEpisode):
        return verb
    w = episode.world
    destination = expert.removeprefix("go to ")
    if destination in w.rooms:
        return "go-room"
    if w.holding is not None:
        return "go-target"
    goal_objects = [o for o in w.states if w.kind_of[o] == w.goal_object]
    in_sight = any(o in episode.observation for o in goal_objects)
    return "go-seen" if in_sight else "go-hidden"


def diagnose(
    rollouts: pd.DataFrame, env: TextEnvironment, specs: dict[str, TaskSpec]
) -> list[dict[str, object]]:
    """One row per decision class: steps, share of steps, expert-match, invalid and chance rates."""
    # per class: steps, matched, invalid, chance; and (matched?, task) per step for the interval
    steps: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    chosen: dict[str, list[tuple[bool, str]]] = defaultdict(list)
    for (task_id, _), episode_rows in rollouts.groupby(["task_id", "rollout_idx"]):
        episode = env.game(specs[str(task_id)])
        household = isinstance(episode, HouseholdEpisode)
        for row in episode_rows.sort_values("step_idx").itertuples():
            actions = episode.actions
            expert = episode.expert_action()
            kind = step_class(episode, expert)
            choices = [a for a in actions if a.startswith("go to ")] if household else actions
            tally = steps[kind]
            tally[0] += 1
            tally[1] += row.action == expert
            chosen[kind].append((row.action == expert, str(task_id)))
            tally[2] += not row.action_valid
            tally[3] += 1 / len(choices) if kind.startswith("go") or not household else 0.0
            index = actions.index(row.action) if row.action_valid else None
            episode.step(index)
    total = sum(t[0] for t in steps.values())
    return [
        {
            "expert action": kind,
            "steps": int(n),
            "share of steps": f"{n / total:.2f}",
            "policy chose it [95 % CI]": _rate(chosen[kind]),
            "invalid answer": f"{invalid / n:.2f}",
            "uniform pick": f"{chance / n:.2f}" if chance else "–",
        }
        for kind, (n, _, invalid, chance) in sorted(steps.items(), key=lambda kv: -kv[1][0])
    ]


def _rate(steps: list[tuple[bool, str]]) -> str:
    """The share of right steps with its 95 % interval clustered by task."""
    right, tasks = zip(*steps, strict=True)
    estimate = accuracy(right, tasks)
    return f"{estimate.value:.2f} [{estimate.low:.2f}, {estimate.high:.2f}]"


def markdown(rows: list[dict[str, object]]) -> str:
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the run's config (household, textworld)")
    parser.add_argument("rollouts", nargs="+", help="eval id_rollouts.parquet files")
    args = parser.parse_args()
    config = load_config(args.config)
    env = config.environment.env
    if not isinstance(env, TextEnvironment):
        parser.error(f"{args.config}: text environments (household, textworld, alfworld) only")
    by_id = {t.task_id: t.spec for t in eval_tasks(config, "id")}
    for path in args.rollouts:
        rollouts = pd.read_parquet(path)
        outcomes = rollouts.drop_duplicates(["task_id", "rollout_idx"])["outcome"]
        print(f"{Path(path)}: {len(outcomes)} episodes, success {(outcomes > 0).mean():.3f}")
        print(markdown(diagnose(rollouts, env, by_id)))


if __name__ == "__main__":
    main()
