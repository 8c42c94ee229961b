"""What the loop, the environments and the models agree on about generating text: chat
messages, one sampled answer (`Generation`) and the `Engine` protocol that samples them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

Messages = list[dict[str, str]]
"""A chat: messages with a role and content, rendered by the model's chat template."""
AnswerScore = Literal["sum", "mean"]
"""How a chosen answer is scored: the sum of its tokens' log-probs, or their mean."""


@dataclass(frozen=True)
class Generation:
    """One sampled answer."""

    text: str  # decoded response, special tokens removed
    prompt_token_ids: list[int]
    token_ids: list[int]  # response tokens as sampled, EOS included when it stopped
    logprobs: list[float]  # the sampler's log-prob of each response token (temperature-scaled)
    finish_reason: str  # "stop" (EOS, or ended by `on_token`) or "length" (max_new_tokens)
    # With `top_logprobs=k`: the k likeliest (token id, log-prob) pairs at each response position.
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)


class Engine(Protocol):
    """Samples one answer per prompt, each with its own seed. With `json_keys` the keys of the
    answer's top-level JSON objects are decoded among those names only (guided decoding)."""

    def generate(
        self,
        prompts: Sequence[Messages],
        seeds: Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float,
        batch_size: int,
        on_batch: Callable[[int], None] | None = None,
        json_keys: Sequence[str] | None = None,
    ) -> list[Generation]: ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of token ids (special tokens kept): the prompt column of the datasets."""
        ...


@runtime_checkable
class Chooser(Protocol):
    """An engine that can pick an answer among listed ones by its probability of writing each
    (`policy.answers: choose`); the in-process engine can."""

    def choose(
        self,
        prompts: Sequence[Messages],
        answers: Sequence[Sequence[str]],
        seeds: Sequence[int],
        *,
        temperature: float,
        batch_size: int,
        score: AnswerScore = "sum",
    ) -> list[Generation]: ...
