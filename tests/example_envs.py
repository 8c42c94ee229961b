"""The example environments that tests in more than one tier meet: corridors that break the
environment contract one way each (examples/corridor), which the `broken_envs` fixture
(tests/conftest.py) writes to a file and `corridor_config` names in the corridor example's
config; and the OpenEnv example server's command (the `openenv_server` fixture)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CORRIDOR_FILE = ROOT / "examples" / "corridor" / "corridor.py"
OPENENV_EXAMPLE = ROOT / "examples" / "openenv"
OPENENV_SERVER = f"{sys.executable} {OPENENV_EXAMPLE / 'guess_server.py'} --port {{port}}"

BROKEN = f'''
"""Corridors that break the environment contract, one way each."""
import dataclasses
import json
import sys

from rlanything_core.envs.interface import Environment, environment_class

Corridor = environment_class("{CORRIDOR_FILE}:CorridorEnvironment")
corridor = sys.modules[Corridor.__module__]


class EndlessEpisode(corridor.CorridorEpisode):
    def act(self, answer):
        move = super().act(answer)
        self.done = self.success = False  # never ends, never wins
        return dataclasses.replace(move, done=False)


class NeverEnds(Corridor):
    def new_episode(self, spec, shots, root):
        return EndlessEpisode(spec)


class RaisesValueError(Corridor):
    def parse_spec(self, data):
        if isinstance(data, dict):  # what a rewrite proposal is merged into
            raise ValueError("dicts are not specs here")
        return super().parse_spec(data)


class Lossy(corridor.CorridorSpec):
    def to_json(self):
        return json.dumps({{**self.model_dump(), "max_steps": 80}})


class DropsAField(Corridor):
    def generate(self, split, n, seed):
        return [Lossy(**s.model_dump()) for s in super().generate(split, n, seed)]

    def parse_spec(self, data):
        return Lossy(**super().parse_spec(data).model_dump())


class Missing(Environment):
    def parse_spec(self, data):
        raise NotImplementedError
'''


def corridor_config(tmp_path: Path, env: str, rounds: int | None = None) -> Path:
    """The corridor example's config with environment `env`."""
    data = yaml.safe_load((ROOT / "examples" / "corridor" / "config.yaml").read_text())
    data["environment"]["name"] = env
    if rounds is not None:
        data["rounds"] = rounds
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
