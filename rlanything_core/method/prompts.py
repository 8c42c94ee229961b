"""Chat prompts of the three models: the policy, the reward model (judge) and the environment model.

Each function returns chat messages; the model's chat template renders them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rlanything_core.base.generation import Messages

ActionFormat = Literal["number", "text"]

INVALID_ACTION = "(invalid)"
"""How a history shows a step whose answer named no admissible action."""

POLICY_INTRO = "You are an agent in a text environment."
"""The policy's system prompt's first sentence unless the environment names its world
(`TextEnvironment.policy_intro`; household: "You are an agent in a house.")."""


def policy_system(action_format: ActionFormat = "number", intro: str = POLICY_INTRO) -> str:
    """The policy's system prompt: `intro`, then how to answer (the action's number, or its
    text, in \\boxed{})."""
    how = (
        "one admissible action, copied exactly, in \\boxed{}, for example \\boxed{look}."
        if action_format == "text"
        else "the number of one admissible action in \\boxed{}, for example \\boxed{3}."
    )
    return (
        f"{intro} Reach the goal in as few steps as possible. Think briefly, then answer with "
        + how
    )


def format_actions(actions: Sequence[str], action_format: ActionFormat = "number") -> str:
    """The admissible actions, one a line: numbered from 1 ('1. look'), or, when the policy
    answers with the action's text, bulleted ('- look')."""
    if action_format == "text":
        return "\n".join(f"- {a}" for a in actions)
    return "\n".join(f"{i}. {a}" for i, a in enumerate(actions, start=1))


def policy_messages(
    goal: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    actions: Sequence[str],
    action_format: ActionFormat = "number",
    intro: str = POLICY_INTRO,
) -> Messages:
    """The policy's prompt for one step.

    Args:
        goal: the task's goal text.
        history: the previous (action, observation) pairs to show, oldest first; an invalid answer
            appears as the action "(invalid)".
        observation: what the agent observes now.
        actions: the admissible actions.
        action_format: "number": the actions are numbered from 1 and the answer is a number;
            "text": they are listed as they are and the answer is one of them.
        intro: the system prompt's first sentence, naming the agent's world (`policy_system`).
    """
    lines = [f"Your task is to: {goal}."]
    if history:
        lines.append("Recent steps:")
        lines += [f"> {act}\n{obs}" for act, obs in history]
    lines += [f"Now: {observation}", "Admissible actions:", format_actions(actions, action_format)]
    return [
        {"role": "system", "content": policy_system(action_format, intro)},
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
    """The reward model's prompt for one step of one trajectory (the paper's judge prompt): the
    task, the history, the agent's response and action, and the observations around it; the
    judge answers +1 or −1 in \\boxed{}."""
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
