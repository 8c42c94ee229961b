"""Fill the TextWorld game cache on the idle core while the ablation runs (about a second a game).

`generate_textworld_specs` tries the drafts of `textworld_drafts` in order, so they can be
walked without generating them (the run used an inline copy of that loop, since moved into the
library); `game_of` is safe when two processes generate the same game. Run as (both at one
torch thread, from the repository root):

- `python fill_cache.py warm`: the environment model's 2000 warm-start spec games, from the end
  of the list while the warm start walks it from the start (run as `pregen.py`, 00:15-00:27,
  `fill-cache-warm.log`);
- `python fill_cache.py ood`: the 400 held-out out-of-domain games (`evaluation.seed` 1000),
  in order, while the environment model trained (run as `pregen_ood.py`, 00:30-00:41,
  `fill-cache-ood.log`).
"""

import itertools
import sys
import time
from typing import Literal

from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.textworld import game as g
from rlanything_core.run.config import load_config


def drafts(split: Literal["id", "ood"], seed: int, n: int) -> list[g.TextWorldSpec]:
    """The first `n` specs `generate_textworld_specs(split, ·, seed)` tries, in its order."""
    return list(itertools.islice(g.textworld_drafts(split, seed), n))


def cached(spec: g.TextWorldSpec) -> bool:
    return (g.cache_root() / g.spec_hash(spec) / "meta.json").is_file()


def warm() -> None:
    config = load_config("configs/ablation-textworld.yaml")
    ws = config.env_model.warm_start
    n = -(-ws.episodes // ws.episodes_per_task)
    listed = drafts("id", derive_seed(config.seed, "warm-start", "env_model") % 2**31, n)
    print(n, "drafts,", sum(map(cached, listed)), "cached", flush=True)
    started = time.time()
    for i, spec in enumerate(reversed(listed)):
        if cached(spec):
            if i + 1 == n or cached(listed[n - 2 - i]):
                print("met the warm start at", n - 1 - i, flush=True)
                break
            continue
        try:
            g.game_of(spec)
        except g.SpecError as exc:
            print("skip", str(exc)[:100], flush=True)
        if i % 50 == 0:
            print(i, round(time.time() - started), flush=True)


def ood() -> None:
    started = time.time()
    made = g.generate_textworld_specs("ood", 400, derive_seed(1000, "ood") % 2**31)
    print("done", len(made), round(time.time() - started), flush=True)


if __name__ == "__main__":
    {"warm": warm, "ood": ood}[sys.argv[1]]()
