"""Chat prompts of the three models: the policy, the reward model (judge) and the environment model.

Each function returns chat messages; the model's chat template renders them.
"""

from __future__ import annotations

from collections.abc import Sequence

Messages = list[dict[str, str]]

POLICY_SYSTEM = (
    "You are an agent in a house. Reach the goal in as few steps as possible. "
    "Think briefly, then answer with the number of one admissible action in \\boxed{}, "
    "for example \\boxed{3}."
)


def format_actions(actions: Sequence[str]) -> str:
    """Numbered admissible actions, 1-based: '1. look'."""
    return "\n".join(f"{i}. {a}" for i, a in enumerate(actions, start=1))


def policy_messages(
    goal: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    actions: Sequence[str],
) -> Messages:
    """The policy's prompt for one step.

    Args:
        goal: the task's goal text.
        history: the previous (action, observation) pairs to show, oldest first; an invalid answer
            appears as the action "(invalid)".
        observation: what the agent observes now.
        actions: the admissible actions, numbered from 1 in the prompt.
    """
    lines = [f"Your task is to: {goal}."]
    if history:
        lines.append("Recent steps:")
        lines += [f"> {act}\n{obs}" for act, obs in history]
    lines += [f"Now: {observation}", "Admissible actions:", format_actions(actions)]
    return [
        {"role": "system", "content": POLICY_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]


JUDGE_SYSTEM = (
    "You judge ONE step of an agent. Given the task, the history so far, the agent's response at "
    "this step (reasoning and chosen action) and the observation that followed, answer +1 if the "
    "action is appropriate, the reasoning relevant and free of invented facts, and the action "
    "valid and consistent with the next observation; otherwise -1. Think first, then put the "
    "score in \\boxed{}, as \\boxed{1} or \\boxed{-1}."
)


def judge_messages(
    goal: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    response: str,
    action: str | None,
    next_observation: str,
) -> Messages:
    """The reward model's prompt for one step of one trajectory (METHOD.md §2, judge prompt)."""
    lines = [f"Task: {goal}."]
    if history:
        lines.append("History:")
        lines += [f"> {act}\n{obs}" if obs else f"> {act}" for act, obs in history]
    lines += [
        f"Observation before the step: {observation}",
        f"Agent's response: {response}",
        f"Chosen action: {action or '(invalid answer: no admissible action)'}",
        f"Observation after the step: {next_observation}",
    ]
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]
