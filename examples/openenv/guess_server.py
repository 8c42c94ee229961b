"""A small OpenEnv environment server, built with openenv-core (the `openenv` extra): guess a
secret number between 1 and `high`; the server answers "too low" or "too high". Its reset takes
the task parameter `high`, so rlanything's environment model can make games harder or easier.

    python examples/openenv/guess_server.py --port 8000

serves it on http://127.0.0.1:8000 (docs/openenv.md trains on it)."""

from __future__ import annotations

import argparse
import random
from typing import Any
from uuid import uuid4

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    guess: int = Field(..., description="a whole number, your guess")


class GuessObservation(Observation):
    feedback: str = Field("", description="what the last guess told")


class GuessEnvironment(Environment):
    """One game per session: a seeded secret in [1, high]."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self.low, self.high, self.secret = 1, 16, 1

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, high: int = 16, **_: Any
    ) -> GuessObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self.low, self.high = 1, max(2, int(high))
        self.secret = random.Random(seed).randint(self.low, self.high)
        return GuessObservation(feedback=f"The number is between 1 and {self.high}.")

    def step(self, action: GuessAction, **_: Any) -> GuessObservation:  # type: ignore[override]
        self._state.step_count += 1
        g = action.guess
        if g == self.secret:
            return GuessObservation(feedback=f"{g} is right.", done=True, reward=1.0)
        # a guess inside the range still possible is progress
        useful = self.low <= g <= self.high
        if g < self.secret:
            self.low = max(self.low, g + 1)
            said = f"{g} is too low"
        else:
            self.high = min(self.high, g - 1)
            said = f"{g} is too high"
        return GuessObservation(
            feedback=f"{said}; the number is between {self.low} and {self.high}.",
            reward=0.1 if useful else 0.0,
        )

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    # rlanything plays every episode of a round at once, each in its own session
    parser.add_argument("--max-sessions", type=int, default=256)
    args = parser.parse_args()
    app = create_app(
        GuessEnvironment,
        GuessAction,
        GuessObservation,
        env_name="guess",
        max_concurrent_envs=args.max_sessions,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
