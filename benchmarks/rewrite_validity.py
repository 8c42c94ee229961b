"""How often does the environment model propose a valid rewrite?

    python benchmarks/rewrite_validity.py \
        --config benchmarks/results/rewrite-validity/ev-g-128x4-ws2000x4-t0.3.yaml \
        --tasks 200 --out ev-g.json

Issue 20 asks for an environment model that proposes valid rewrites at least half of the time, so
that task adaptation can act. This measures that outside a training run: the config's environment
model (warm-started first, as `rlanything train` does, when `env_model.warm_start` is enabled)
critiques and then rewrites `--tasks` tasks of the config's initial pool, each once "harder" (as
if solved in 7/8 of its attempts) and once "easier" (1/8), with the round's own prompts and
sampling settings. A critique at run time summarizes the reward model's verdicts on the task's
steps; here there are none, so the critique prompt carries only the task and its accuracy.
`--critique quotes` has the model write each critique from a prompt that quotes 0-6 reviewer
verdicts on the task's steps, drawn as the warm start's critique demonstrations draw them
(`demo_judgments`; one set per task, shared by both directions), in the warm-started reward
model's words, which are a round's too with `reward_model.answers: choose`.
`--critique demo` skips the critique and gives every rewrite prompt the critique a warm-start
demonstration with that accuracy and no reviewer quotes carries (`demo_critique`): the rewrite
step alone, on prompts like those it was trained on.

Every proposal is parsed as a round parses it (the last JSON object merged onto the task's
spec, then the environment's validation, which for household includes solvability within the
step limit). The JSON: the valid fraction with its 95 % interval clustered by task, per
direction, and the counts of every error message (the invalid ones' reasons), plus examples.
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

import pandas as pd
from common import save

from rlanything_core.base.schemas import rows_frame
from rlanything_core.envs.demos import demo_critique, demo_judgments
from rlanything_core.envs.interface import TaskRef, TaskSpec
from rlanything_core.method.stats import accuracy, as_metrics
from rlanything_core.models.engines import open_engine
from rlanything_core.models.sft import tokenize_demos
from rlanything_core.models.training import sft_finetune
from rlanything_core.run.adapting import propose_rewrites
from rlanything_core.run.config import RunConfig, load_config
from rlanything_core.run.warm_start import warm_start_demos

DIRECTIONS = {"harder": 7 / 8, "easier": 1 / 8}
"""Direction → the accuracy the prompt reports (just outside the paper's band either way)."""


def env_model_source(config: RunConfig, work: Path) -> str:
    """The environment model to sample from: the configured one, warm-started into `work` when
    `env_model.warm_start` is enabled (the train flow's warm-start stage, same settings)."""
    em, ws = config.env_model, config.env_model.warm_start
    if not ws.enabled:
        return em.model.source
    out = work / "env_model_warm_start"
    if any(out.glob("*.safetensors")):  # warm-started by an earlier call with this --work
        print(f"warm start: reusing {out}")
        return str(out)
    demos = warm_start_demos(config, "env_model", ws)
    started = time.monotonic()
    sft_finetune(
        em.model.source,
        out,
        lambda tokenizer: tokenize_demos(tokenizer, demos),
        device=em.model.device,
        dtype=em.model.dtype,
        lora_rank=em.lora_rank,
        lr=ws.lr,
        epochs=ws.epochs,
        micro_batch_size=ws.micro_batch_size,
        seed=config.seed,
        lr_schedule=ws.lr_schedule,
        group_by_length=ws.group_by_length,
    )
    steps = ws.epochs * math.ceil(len(demos) / ws.micro_batch_size)
    print(
        f"warm start: {len(demos)} demonstrations, {steps} steps, "
        f"{time.monotonic() - started:.0f} s"
    )
    return str(out)


def proposals(config: RunConfig, source: str, specs: list[TaskSpec], critique: str) -> pd.DataFrame:
    """One candidates row per (task, direction), made as a round makes them (critique, then
    rewrite, then parse): the critique written by the model, or with `critique` "demo" the warm
    start's."""
    em = config.env_model
    judged = rows_frame([], "judgments")
    if critique == "quotes":
        draws = random.Random(config.seed)
        judged = pd.concat(
            [
                demo_judgments(draws, draws.choice(list(DIRECTIONS.values()))).assign(
                    task_id=f"task-{k:04d}", task_version=1
                )
                for k in range(len(specs))
            ],
            ignore_index=True,
        )
    triggered = [
        (TaskRef(f"task-{k:04d}", 1, spec), acc, direction)
        for k, spec in enumerate(specs)
        for direction, acc in DIRECTIONS.items()
    ]
    rows = propose_rewrites(
        config.environment.env,
        open_engine(em.model, source, "env_model", em.lora_rank),
        triggered,
        judged,
        rows_frame([], "rollouts"),
        em=em,
        round_idx=0,
        base_seed=config.seed,
        checkpoint=source,
        critiques=[demo_critique(acc, ()) for _, acc, _ in triggered]
        if critique == "demo"
        else None,
    )
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> dict[str, object]:
    """Valid fraction (95 % interval clustered by task) overall and per direction, and the
    invalid proposals' reasons."""
    task = "parent_task_id"
    out: dict[str, object] = {
        **as_metrics("valid", accuracy(frame["valid"].to_numpy(), frame[task])),
        "proposals": len(frame),
        "tasks": int(frame[task].nunique()),
    }
    for d in DIRECTIONS:
        part = frame[frame["direction"] == d]
        out[d] = as_metrics("valid", accuracy(part["valid"].to_numpy(), part[task]))
    answers = frame.pivot_table(index=task, columns="direction", values="response", aggfunc="first")
    # A model that reads the direction answers "harder" and "easier" differently (both are
    # sampled with the same seed, as a round seeds by task).
    out["same_answer_both_directions"] = float((answers["harder"] == answers["easier"]).mean())
    reasons = Counter(frame.loc[~frame["valid"], "error"].fillna("?").str.slice(0, 160))
    out["invalid_reasons"] = dict(reasons.most_common())
    columns = ["parent_task_id", "direction", "critique", "response", "valid", "error"]
    out["examples"] = frame.groupby("valid").head(5)[columns].to_dict("records")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--tasks", type=int, default=200, help="tasks of the pool to rewrite")
    parser.add_argument("--out", required=True, help="JSON result path")
    parser.add_argument(
        "--critique",
        choices=("model", "quotes", "demo"),
        default="model",
        help="model: the environment model writes each critique (as in a round, here with no "
        "reviewer verdicts to quote); quotes: from prompts quoting reviewer verdicts; demo: every "
        "prompt carries the warm-start demonstrations' critique",
    )
    parser.add_argument(
        "--work",
        help="keep the warm-started environment model in this directory and reuse it when it is "
        "there (another --critique on the same model); default: a temporary directory",
    )
    args = parser.parse_args()
    config = load_config(args.config)
    env_config = config.environment
    specs = list(env_config.env.generate(env_config.split, args.tasks, env_config.seed))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rewrite-validity-") as temporary:
        work = Path(args.work or temporary)
        frame = proposals(config, env_model_source(config, work), specs, args.critique)
    result = summary(frame)
    save(
        Path(args.out),
        {
            "benchmark": "rewrite-validity",
            "config_file": args.config,
            "critique": args.critique,
            "config": config.model_dump(mode="json"),
            "wall_seconds": round(time.monotonic() - started, 1),
            **result,
        },
    )
    valid, low, high = (float(result[k]) for k in ("valid", "valid_ci_low", "valid_ci_high"))  # type: ignore[arg-type]
    print(
        f"valid rewrites: {100 * valid:.1f} % [{100 * low:.1f}, {100 * high:.1f}] of "
        f"{len(frame)} proposals on {result['tasks']} tasks"
    )
    for d in DIRECTIONS:
        part = result[d]
        assert isinstance(part, dict)
        print(
            f"  {d}: {100 * part['valid']:.1f} % [{100 * part['valid_ci_low']:.1f}, "
            f"{100 * part['valid_ci_high']:.1f}]"
        )
    same = float(result["same_answer_both_directions"])  # type: ignore[arg-type]
    print(f"  same answer harder and easier: {100 * same:.1f} % of the tasks")
    for reason, n in list(result["invalid_reasons"].items())[:8]:  # type: ignore[union-attr]
        print(f"  {n:4d}  {reason}")


if __name__ == "__main__":
    main()
