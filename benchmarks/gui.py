"""GUI environment throughput and success, in headless Chromium.

1. The environment alone: the scripted expert plays every seed task (settings, mail, files) with
   screenshots on; steps per second of the browser, the app server and the verifier together.
2. With a policy (optional): a finished gui training run (--run-dir) gives, per round, the rollout
   stage's steps per second, the episodes' success rate and the invalid-action rate; an
   evaluation directory (--eval-dir, written by `rlanything eval`) gives held-out success rates.

    python benchmarks/gui.py --run-dir runs/gui-demo --eval-dir runs/gui-demo-eval \
        --out benchmarks/results/gui-demo.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from common import save
from run_report import eval_success, run_rounds

from rlanything_core.envs.gui.browser import Browser, BrowserOptions, GuiEpisode
from rlanything_core.envs.gui.tasks import SEED_TASKS, parse_gui_spec


def expert_throughput(repeats: int) -> dict[str, Any]:
    """The expert plays every seed task `repeats` times (new starting-state seed each time)."""
    steps = episodes = solved = 0
    with tempfile.TemporaryDirectory() as tmp, Browser(BrowserOptions()) as browser:
        start = time.perf_counter()
        for k in range(repeats):
            for n, (_, app, template, params) in enumerate(SEED_TASKS):
                spec = parse_gui_spec(
                    {"app": app, "template": template, "params": params, "max_steps": 40, "seed": k}
                )
                shots = Path(tmp) / f"{k}-{n}"
                episode = GuiEpisode(spec, browser, 0, shots, Path(tmp))
                while not episode.done:
                    step = episode.expert()
                    assert step is not None, "the expert never loses the goal"
                    episode.act(f"\\boxed{{{step[0]}}}")
                steps += episode.steps_taken
                episodes += 1
                solved += episode.success
        seconds = time.perf_counter() - start
    return {
        "episodes": episodes,
        "steps": steps,
        "seconds": round(seconds, 2),
        "steps_per_s": round(steps / seconds, 2),
        "episodes_per_s": round(episodes / seconds, 3),
        "success_rate": solved / episodes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="expert passes over the seed tasks")
    parser.add_argument("--run-dir", type=Path, help="a finished gui training run")
    parser.add_argument("--eval-dir", type=Path, help="`rlanything eval` output of a gui policy")
    parser.add_argument("--out", default="runs/bench/gui-demo.json")
    args = parser.parse_args()
    result: dict[str, Any] = {"expert": expert_throughput(args.repeats)}
    if args.run_dir:
        result["run_dir"] = str(args.run_dir)
        result["rounds"] = run_rounds(args.run_dir)
    if args.eval_dir:
        result["eval"] = eval_success(args.eval_dir)
    save(args.out, result)


if __name__ == "__main__":
    main()
