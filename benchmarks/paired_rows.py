"""The paired difference of two ablation rows' held-out accuracies where they were trained in
different ablation directories (a row rerun with another config beside the table it joins):

    python benchmarks/paired_rows.py --a DIR/reward-env --b OTHER/reward --seeds 3 [--out J]

Each side is a row's directory (`<ablate --out>/<row slug>`); its seeds' final evaluations
(`seed_<k>/eval`, else the curve's last step that covers both splits) are pooled per task as
`rlanything ablate` pools them, and A − B is `stats.paired_difference` over the tasks both
played, per split, with its 95 % interval (tasks as units); each row's pooled accuracies with
their intervals too. --out also writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlanything_core.method.stats import paired_difference
from rlanything_core.run.config import load_config
from rlanything_core.run.rundir import write_json
from rlanything_flows.ablate import SPLITS, eval_datasets, per_task_accuracy, pooled_intervals


def final_eval(cell: Path) -> Path:
    """A (row, seed) directory's evaluation after its last round."""
    if (cell / "eval" / "eval.json").is_file():
        return cell / "eval"
    steps = sorted((cell / "run" / "eval").glob("step_*/eval.json"))
    for path in reversed(steps):
        if all((path.parent / f"{s}_rollouts.parquet").is_file() for s in SPLITS):
            return path.parent
    raise FileNotFoundError(f"{cell} has no evaluation of both splits; run `rlanything ablate`")


def row_datasets(row: Path, seeds: int) -> dict[int, dict]:
    found = {}
    for seed in range(seeds):
        cell = row / f"seed_{seed}"
        config = load_config(cell / "run" / "config.yaml")
        found[seed] = eval_datasets(config, final_eval(cell))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=Path, required=True, help="row directory A")
    parser.add_argument("--b", type=Path, required=True, help="row directory B")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    a, b = row_datasets(args.a, args.seeds), row_datasets(args.b, args.seeds)
    votes = load_config(args.a / "seed_0" / "run" / "config.yaml").reward_model.votes
    result: dict[str, object] = {"a": str(args.a), "b": str(args.b), "seeds": args.seeds}
    for side, found in (("a", a), ("b", b)):  # each row alone, pooled as the ablation pools it
        pooled = pooled_intervals(found, votes)
        result[f"{side}_pooled"] = pooled
        for key in ("eval/id/policy_accuracy", "eval/id/rm_process_balanced_accuracy"):
            if key in pooled:
                v, low, high = (100 * x for x in pooled[key])
                print(f"{side.upper()} {key}: {v:.1f} [{low:.1f}, {high:.1f}]")
    for split in SPLITS:
        acc_a, acc_b = per_task_accuracy(a, split), per_task_accuracy(b, split)
        both = acc_a.index.intersection(acc_b.index)
        d, low, high = paired_difference(acc_a[both].to_numpy(), acc_b[both].to_numpy())
        result[split] = {
            "a": float(acc_a[both].mean()),
            "b": float(acc_b[both].mean()),
            "difference": [d, low, high],
            "tasks": len(both),
        }
        print(
            f"{split}: A {100 * acc_a[both].mean():.1f} %, B {100 * acc_b[both].mean():.1f} %, "
            f"A − B {100 * d:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] ({len(both)} tasks)"
        )
    if args.out:
        write_json(args.out, result)
        print(json.dumps({"written": str(args.out)}))


if __name__ == "__main__":
    main()
