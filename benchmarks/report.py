"""Print the benchmark table from the JSON result files, by default those in benchmarks/results/.

    python benchmarks/report.py [--results runs/bench]

`--results DIR` reads the same file names from another directory (`make bench` writes to
runs/bench unless given BENCH_OUT=benchmarks/results); the file column shows each file's path.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _held_out_accuracy(point: dict[str, float]) -> str:
    """A learning-curve point's in-domain policy accuracy with its interval and episode count."""
    key = "eval/id/policy_accuracy"
    return (
        f"{100 * point[key]:.1f} % [{100 * point[key + '_ci_low']:.1f}, "
        f"{100 * point[key + '_ci_high']:.1f}] ({point['eval/id/episodes']:.0f} episodes)"
    )


def rows() -> list[tuple[str, str, str]]:
    """(benchmark, result, file) rows for every result present."""
    out = []
    for config in ("tiny", "demo"):
        tp = _load(f"throughput-{config}")
        if tp:
            for part, label, model in (
                ("rollout", "rollout", tp["policy"]),
                ("reward_scoring", "RM scoring", tp["reward_model"]),
            ):
                r = tp[part]
                result = (
                    f"{r['ours_tokens_per_s']:.0f} tok/s vs `generate` "
                    f"{r['generate_tokens_per_s']:.0f} tok/s: overhead ratio "
                    f"**{r['overhead_ratio']:.2f}**"
                )
                same = "same tokens" if r["same_tokens"] else "tokens differ (rounding)"
                result += (
                    f"; lean decode step **{r['lean_decoding_speedup']:.2f}×** "
                    f"transformers' step ({r['hf_step_seconds']:.1f} s → "
                    f"{r['ours_seconds']:.1f} s); shared prompt prefix prefilled once: "
                    f"**{r['prefix_sharing_speedup']:.2f}×** the whole-prompt prefill "
                    f"({r['whole_prompts_seconds']:.1f} s → {r['hf_step_seconds']:.1f} s); "
                    f"{same}; {tp['machine']['torch_threads']} torch thread(s)"
                )
                out.append(
                    (f"{label} throughput, {config} ({model})", result, f"throughput-{config}.json")
                )
    for config in ("tiny", "demo"):
        orch = _load(f"orchestration-{config}")
        if orch:
            parts = orch["per_round"]
            prefect = sum(p["prefect_s"] for p in parts)
            parquet = sum(p["parquet_s"] for p in parts)
            mlflow = sum(p["mlflow_s"] for p in parts)
            total = sum(p["round_s"] for p in parts)
            out.append(
                (
                    f"orchestration overhead, {config} ({orch['rounds']} round(s))",
                    f"**{orch['overhead_pct']:.1f}%** of {total:.1f} s of rounds: Prefect "
                    f"{prefect:.1f} s, Parquet {parquet:.2f} s, MLflow {mlflow:.1f} s",
                    f"orchestration-{config}.json",
                )
            )
            out.append(
                (
                    f"peak resident memory, {config} run",
                    f"{orch['peak_rss_tree_mb']:.0f} MB (process tree), "
                    f"{orch['peak_rss_main_mb']:.0f} MB (main process)",
                    f"orchestration-{config}.json",
                )
            )
    for name, label in (("trl-grpo/tiny", "tiny"), ("trl-grpo/smollm2", "SmolLM2-135M")):
        trl = _load(name)
        if not trl:
            continue
        ours, theirs = trl["ours"], trl["trl"]
        settings = trl["settings"]
        weights = f", {settings['dtype']}"
        weights += f", LoRA rank {settings['lora_rank']}" if settings["lora_rank"] else ""

        def split(phases: dict[str, float]) -> str:
            return ", ".join(f"{k} {v:.1f}" for k, v in phases.items())

        out.append(
            (
                f"training step vs TRL {theirs['trl_version']} GRPOTrainer, equal work "
                f"({label}{weights})",
                f"{trl['invariants']['samples_through_the_loss']} completions through the loss "
                f"on both sides: ours {ours['median_s']:.1f} s per round "
                f"({split(ours['median_phases_s'])}) vs TRL {theirs['median_s']:.1f} s per step "
                f"({split(theirs['median_phases_s'])}): ratio **{trl['ratio_per_step']:.2f}**",
                f"{name}.json",
            )
        )
    speed = _load("sft-speed")
    if speed:
        flags = ", ".join(speed["machine"]["cpu_flags"])
        for row in speed["sft"][1:]:
            batches = "length-grouped" if row["group_by_length"] else "random"
            out.append(
                (
                    f"warm-start step, {row['dtype']}, {batches} batches (tiny-128x4; {flags})",
                    f"{row['median_s_per_step']:.3f} s per step of {speed['micro_batch_size']} "
                    f"pairs ({row['padding_fraction']:.0%} padding) vs float32 random "
                    f"{speed['sft'][0]['median_s_per_step']:.3f} s: **{row['speedup']:.2f}×**",
                    "sft-speed.json",
                )
            )
        gen = speed["generation"]
        out.append(
            (
                f"sampling, {gen[1]['dtype']} vs float32 (tiny-128x4; {flags})",
                f"{gen[1]['prompts']} answers in {gen[1]['seconds']:.1f} s vs "
                f"{gen[0]['seconds']:.1f} s: **{gen[1]['speedup']:.2f}×**",
                "sft-speed.json",
            )
        )
    for env in ("household", "textworld"):
        packing = _load(f"choose-packing-{env}")
        if packing:
            flags = ", ".join(packing["machine"]["cpu_flags"])
            out.append(
                (
                    f"choosing: answers packed after their prompt vs a KV-cache copy per answer, "
                    f"{env} ({packing['model']}; {flags})",
                    f"{packing['distinct_prompts']} prompts: {packing['packed_seconds']:.2f} s vs "
                    f"{packing['cache_copy_seconds']:.2f} s: **{packing['speedup']:.2f}×**; "
                    f"log-probs within {packing['max_logprob_difference']:.0e} "
                    f"({packing['torch_threads']} torch thread(s))",
                    f"choose-packing-{env}.json",
                )
            )
        learning = _load(f"learning-{env}")
        if learning:
            flags = ", ".join(learning["machine"]["cpu_flags"])
            gain = learning["id"]
            out.append(
                (
                    f"learning benchmark, {env} (configs/learning-{env}.yaml; {flags})",
                    f"held out in-domain {_held_out_accuracy(learning['curve'][0])} → "
                    f"{_held_out_accuracy(learning['curve'][-1])} after {gain['after_step']} "
                    f"rounds (**{gain['gain_points']:+.1f} points**, intervals apart: "
                    f"{gain['intervals_apart']}) in {learning['wall_seconds'] / 60:.1f} min",
                    f"learning-{env}.json",
                )
            )
    for name in ("serve-load", "serve-load-smollm2"):
        load = _load(name)
        if load:
            rss, metrics = load["rss_mb"], load["server_metrics"]
            after = "/".join(str(a) for a in rss["after_each_burst"])
            out.append(
                (
                    f"`rlanything serve` under load ({load['model']}; {load['bursts']} bursts of "
                    f"{load['requests_per_burst']} concurrent requests)",
                    f"{load['requests']} requests, **{load['errors']} errors**; peak RSS "
                    f"**{rss['peak']} MB** (idle {rss['baseline']} MB, after each burst {after}); "
                    f"answers in {load['latency_s_200']['median']:.2f} s median, "
                    f"{load['latency_s_200']['p95']:.2f} s p95; "
                    f"{metrics['rlanything_serve_cancelled_answers_total']:.0f} abandoned streams "
                    f"stopped decoding; SIGTERM: exit {load['sigterm']['returncode']} in "
                    f"{load['sigterm']['seconds_to_exit']:.1f} s",
                    f"{name}.json",
                )
            )
    profile = _load("round-profile-demo")
    if profile:
        peaks = profile["matmul_peak_gflop_per_s"]
        flags = ", ".join(profile["machine"]["cpu_flags"])
        # Shares of the stages' time (the learning curve's evaluations run outside the stages).
        totals: dict[str, float] = {}
        for stage in profile["stages"]:
            for name, part in stage["parts"].items():
                totals[name] = totals.get(name, 0.0) + part["seconds"]
        spent = sum(s["seconds"] for s in profile["stages"])
        shares = ", ".join(
            f"{name} {100 * seconds / spent:.0f} %"
            for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])
        )
        out.append(
            (
                f"where a demo round goes (SmolLM2, {profile['model_dtype']}; {flags})",
                f"{spent:.0f} s in stages (warm starts included): {shares}; matmul peak "
                f"{peaks['float32']:.0f} GFLOP/s float32, {peaks['bfloat16']:.0f} bfloat16",
                "round-profile-demo.json",
            )
        )
        for stage in profile["stages"]:
            mfu = ", ".join(
                f"{name} {100 * part['mfu']:.1f} %"
                for name, part in stage["parts"].items()
                if "mfu" in part
            )
            if mfu:
                out.append(
                    (
                        f"MFU by part, demo stage {stage['stage']}",
                        f"{stage['seconds']:.1f} s: {mfu}",
                        "round-profile-demo.json",
                    )
                )
    demo = _load("demo-run")
    if demo:
        flags = ", ".join(demo["machine"]["cpu_flags"])
        first = demo["runs"][0] if "runs" in demo else demo  # files before the second run
        out.append(
            (
                f"`make run`'s training alone ({demo['config']}; {flags})",
                f"**{demo['wall_seconds']:.0f} s** wall (warm starts, {len(first['rounds'])} "
                f"rounds and {len(first['eval'])} held-out evaluations), peak RSS "
                f"**{demo['peak_rss_tree_mb']:.0f} MB** (process tree); commit {demo['commit']}",
                "demo-run.json",
            )
        )
    targets = _load("targets-demo")
    if targets:
        for row in targets["targets"]:
            state = {None: "not measured", True: "met", False: "**not met**"}[row["met"]]
            # the number's own file, so that "measured on" says where that number came from
            out.append(
                (
                    f"budget: {row['target']}",
                    f"{row['measured']} (goal {row['goal']}): {state} (targets-demo.json)",
                    row["source"].removeprefix(_shown(RESULTS) + "/"),
                )
            )
    gui = _load("gui-demo")
    if gui:
        ex = gui["expert"]
        out.append(
            (
                "GUI environment alone (expert, headless Chromium, screenshots on)",
                f"**{ex['steps_per_s']:.2f} steps/s** over {ex['episodes']} episodes "
                f"({ex['steps']} steps), success {ex['success_rate']:.0%}",
                "gui-demo.json",
            )
        )
        for r in gui.get("rounds", []):
            out.append(
                (
                    f"GUI rollouts, SmolLM2 policy, round {r['round']}",
                    f"**{r['steps_per_s']:.2f} steps/s** ({r['steps']} steps, {r['episodes']} "
                    f"episodes in {r['rollout_seconds']:.0f} s), success "
                    f"{r['success_rate']:.1%}, invalid actions {r['invalid_action_rate']:.1%}",
                    "gui-demo.json",
                )
            )
    return out


def measured(file: str) -> str:
    """Where and when a result file was measured: the CPU (files before the model name was
    recorded give their vector flags), the day and the commit, as far as the file records them;
    for a file that names no commit, the commit that added it (results/provenance.json)."""
    data = _load(file.removesuffix(".json")) or {}
    added = ((_load("provenance") or {}).get("files", {}).get(file) or {}).get("committed_in")
    host = data.get("machine", {})
    cpu = host.get("cpu_model") or (
        f"CPU not recorded ({', '.join(host['cpu_flags'])})"
        if host.get("cpu_flags")
        else "host not recorded"
    )
    day = str(data["measured_at"])[:10] if data.get("measured_at") else "date not recorded"
    commit = data.get("commit") or (f"committed in {added}" if added else "commit not recorded")
    return f"{cpu}, {day}, {commit}"


def _shown(path: Path) -> str:
    """`path` relative to the repository where it lies inside it."""
    root = Path(__file__).resolve().parent.parent
    full = path.resolve()
    return str(full.relative_to(root) if full.is_relative_to(root) else path)


def main() -> None:
    global RESULTS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the result files' directory")
    RESULTS = parser.parse_args().results
    print("| benchmark | result | measured on | file |")
    print("|---|---|---|---|")
    for name, result, file in rows():
        print(f"| {name} | {result} | {measured(file)} | `{_shown(RESULTS / file)}` |")


if __name__ == "__main__":
    main()
