"""The probe's two runs side by side: per round, the RM's process accuracy (plain and balanced)
on the round's own steps and the share of "progress" among its kept votes; held out (in-domain,
200 games) at each evaluated step, the policy's accuracy and the RM's balanced process accuracy
with their 95 % intervals.

    python benchmarks/results/ablation-textworld/balance-probe/summarize.py OUT_DIR OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEYS = (
    "reward_model/process_accuracy",
    "reward_model/process_balanced_accuracy",
    "reward_model/kept_progress_verdicts",
    "reward_model/kept_samples",
    "policy/accuracy",
)
HELD_OUT = ("policy_accuracy", "rm_process_accuracy", "rm_process_balanced_accuracy")


def main() -> None:
    out, target = Path(sys.argv[1]), Path(sys.argv[2])
    result = {}
    for name in ("plain", "balanced"):
        summary_path = out / name / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        rounds = [{k: r.get(k) for k in ("round", *KEYS)} for r in summary.get("rounds", [])]
        held_out = {}
        for path in sorted((out / name / "eval").glob("step_*/eval.json")):
            stored = json.loads(path.read_text())
            held_out[path.parent.name] = {
                f"{m}{end}": stored.get(f"eval/id/{m}{end}")
                for m in HELD_OUT
                for end in ("", "_ci_low", "_ci_high")
            } | {"episodes": stored.get("eval/id/episodes")}
        result[name] = {"rounds": rounds, "held_out": held_out}
        for r in rounds:
            print(name, r)
        for step, values in held_out.items():
            print(name, step, values)
    target.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
