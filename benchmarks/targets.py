"""The speed and memory budgets of the `make run` demo, read from the benchmark results, met or
not.

Each target names the result file it is read from, the number measured there, whether it is
met, and, where it is not, the next lever: what we would change next, as measured so far. A
target whose result file is missing, or was measured without the checks it now needs (equal
work, padding left out), is "not measured". Writes one JSON and prints a table.

    python benchmarks/targets.py --out benchmarks/results/targets-demo.json

`--results DIR` reads the same file names from another directory: another machine's results
(benchmarks/results/intel-avx512-fp32/ holds an Intel Xeon's without native bfloat16). The next
levers written below read benchmarks/results/ (a 2-core AMD EPYC with AVX512-BF16); a
`levers.json` in DIR ({target: lever}) gives that machine's own, and each row says which it
shows (`next_lever_from`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import save

RESULTS = Path(__file__).resolve().parent / "results"


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / name
    return json.loads(path.read_text()) if path.is_file() else None


def demo_wall_seconds(run: dict[str, Any]) -> float:
    return float(run["wall_seconds"])


def demo_peak_rss_gb(run: dict[str, Any]) -> float:
    return float(run["peak_rss_tree_mb"]) / 1024


def round_seconds(profile: dict[str, Any]) -> float:
    """Seconds in the stages of one round, warm starts aside, averaged over the rounds."""
    stages = [s for s in profile["stages"] if not s["stage"].startswith("warm-start")]
    return sum(float(s["seconds"]) for s in stages) / int(profile["rounds"])


def update_mfu(profile: dict[str, Any]) -> float | None:
    """The policy and RM updates' FLOPs on real tokens (padding left out) over their compute
    seconds (forward, backward, log-prob passes), as a share of the matmul peak of the model's
    dtype measured in the same run. None for a profile that counted padding as useful work."""
    useful = seconds = 0.0
    for stage in profile["stages"]:
        if stage["stage"] not in ("policy-update", "rm-update"):
            continue
        for name in ("train_forward", "backward", "logprob"):
            part = stage["parts"].get(name)
            if part:
                if "mfu_real_tokens" not in part:
                    return None
                useful += float(part["mfu_real_tokens"]) * float(part["seconds"])
                seconds += float(part["seconds"])
    return useful / seconds


def generation_speed_over_generate(throughput: dict[str, Any]) -> float | None:
    """Rollout plus RM scoring tokens per second over `generate`'s on the same work; None for a
    result that records no equal-work invariants (`benchmarks/throughput.py`)."""
    parts = [throughput["rollout"], throughput["reward_scoring"]]
    if not all("invariants" in p for p in parts):
        return None
    ours = sum(p["ours_tokens"] for p in parts) / sum(p["ours_seconds"] for p in parts)
    base = sum(p["generate_tokens"] for p in parts) / sum(p["generate_seconds"] for p in parts)
    return ours / base


def trl_ratio(trl: dict[str, Any]) -> float | None:
    """Our round's seconds over TRL's step's, where the result records its equal-work
    invariants (`benchmarks/trl_grpo.py`); None for one that does not."""
    return float(trl["ratio_per_step"]) if "invariants" in trl else None


def equal_work_speedup(rounds: dict[str, Any]) -> float:
    """One demo round of b94463e's config, b94463e's code over today's, the same steps played
    and judged (`results/equal-work-round/`); the acceptance check aside, as
    the two codes accept different rewrites and so replay different episodes."""
    return float(rounds["ratio_without_acceptance"])


# (name, result file, how to read it, target, "max" or "min", next lever if not met)
TARGETS: list[tuple[str, str, Callable[[dict[str, Any]], float], float, str, str]] = [
    (
        "make run wall seconds (after install, warm starts included)",
        "demo-run.json",
        demo_wall_seconds,
        600.0,
        "max",
        "the tiny policy's and reward model's warm starts, about 315 of the cold run's seconds "
        "(results/demo-loop/); a second run reuses them from the cache",
    ),
    (
        "demo peak RSS, GB (process tree)",
        "demo-run.json",
        demo_peak_rss_gb,
        6.0,
        "max",
        "not the allocator: glibc keeps freed activation memory, and returning it "
        "(MALLOC_MMAP_THRESHOLD_=131072, with torch's huge pages) peaks at 5.6 GB instead of "
        "9.2 GB but takes 1.35x as long (886 s against 656 s alone, demo-memory/); gradient "
        "checkpointing in the updates, shorter-lived activations in the warm starts",
    ),
    (
        "SmolLM2 demo round seconds (stages, warm starts aside)",
        "round-profile-demo.json",
        round_seconds,
        60.0,
        "max",
        "decoding, 18.5 of the round's 61.5 s at 1-13 % MFU (one token per forward over "
        "batches of at most 32 answers): larger decode batches across tasks; the host matters "
        "(the same code took 53.8 s where the bfloat16 matmul peak was 418 GFLOP/s, not 378)",
    ),
    (
        "rollout + RM scoring tokens/s over plain batched generate",
        "throughput-demo.json",
        generation_speed_over_generate,
        3.0,
        "min",
        "the rollout (about 2x generate, against 4x for RM scoring): its decode over the demo's "
        "8 episodes reads every weight for 8 tokens (27-32 of 44-52 ms a step in the linear "
        "layers, about 10 GB/s; sampling/README.md); the rest of a step is per-layer small "
        "operations (17-20 ms). A KV cache kept across an episode's steps would save nothing "
        "here: the demo's prompts (history_steps: 0) share only the system prompt, prefilled "
        "once a batch",
    ),
    (
        "policy and RM update MFU on real tokens (of the measured matmul peak)",
        "round-profile-demo.json",
        update_mfu,
        0.5,
        "min",
        "the backward pass (the lowest part, 28-29 % MFU): the CPU flash-attention kernel's "
        "backward is 14-18 % of an update step and its FLOPs are not counted (eager attention: "
        "1.1x a step, at about 0.9 GB more for a warm-start pass; benchmarks/results/"
        "update-probe/); then PEFT's float32 adapters' dtype copies; the linear layers "
        "themselves run at 88-103 % of the square-matmul peak at these sizes",
    ),
    (
        "outcome-only round / TRL GRPOTrainer step, SmolLM2 (equal work)",
        "trl-grpo/smollm2.json",
        trl_ratio,
        0.4,
        "max",
        "the update, most of the round: micro-batches of prompts that share more of their "
        "tokens; then the round's generation (multi-step episodes) against TRL's single-step "
        "completions",
    ),
    (
        "SmolLM2 round at equal work, speed-up over b94463e",
        "equal-work-round.json",
        equal_work_speedup,
        4.0,
        "min",
        "generation, 44 of the round's 69 s at 1.3-1.6x b94463e's (rollout 1.61x, scoring "
        "1.97x on the AMX Xeon; 1.27x and 1.47x on the AMD EPYC): its decode steps over at most "
        "8 answers (the rollout) or 48 (scoring) read every weight for a few tokens; then the "
        "RM update (1.12-1.17x)",
    ),
]


def _shown(path: Path) -> Path:
    """`path` relative to the repository where it lies inside it."""
    root = RESULTS.parent.parent
    return path.resolve().relative_to(root) if path.resolve().is_relative_to(root) else path


def check(results: Path = RESULTS) -> list[dict[str, Any]]:
    rows = []
    own = _load(results, "levers.json") or {}
    unknown = set(own) - {name for name, *_ in TARGETS}
    if unknown:
        raise ValueError(f"{results / 'levers.json'} names no target {sorted(unknown)}")
    for name, source, read, target, kind, default in TARGETS:
        result = _load(results, source)
        row: dict[str, Any] = {
            "target": name,
            "goal": f"{'<=' if kind == 'max' else '>='} {target}",
        }
        row["source"] = str(_shown(results / source))
        lever = own.get(name, default)
        lever_from = str(_shown(results / "levers.json") if name in own else _shown(RESULTS))
        value = None if result is None else read(result)
        if result is None or value is None:
            # missing, or measured in a way that no longer counts (unequal work, padding)
            row |= {"measured": None, "met": None}
            row |= {"next_lever": lever, "next_lever_from": lever_from}
        else:
            met = value <= target if kind == "max" else value >= target
            row |= {
                "measured": round(value, 3),
                "measured_at": result.get("measured_at"),
                # where: a verdict holds for the machine and commit its number came from
                "commit": result.get("commit"),
                "cpu_model": (result.get("machine") or {}).get("cpu_model"),
                "cpu_flags": (result.get("machine") or {}).get("cpu_flags"),
                "met": met,
                "next_lever": None if met else lever,
                "next_lever_from": None if met else lever_from,
            }
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--results", type=Path, default=RESULTS, help="the result files' directory")
    args = parser.parse_args()
    rows = check(args.results)
    save(args.out, {"benchmark": "targets", "targets": rows})
    for row in rows:
        state = {None: "not measured", True: "met", False: "NOT met"}[row["met"]]
        flags = "+".join(row.get("cpu_flags") or []) or "flags not recorded"
        where = (
            f"{row.get('cpu_model') or 'CPU not recorded'} ({flags}), {row.get('commit') or '?'}"
        )
        print(f"{row['target']}: {row['measured']} (goal {row['goal']}): {state} [{where}]")


if __name__ == "__main__":
    main()
