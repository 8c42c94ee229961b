"""Where the test suite's time goes: each test file's seconds, from the JUnit XML that `make test`
writes (runs/pytest.xml), as JSON beside the host and commit, and as a table.

    python benchmarks/test_durations.py --junit runs/pytest.xml --wall 1234 \
        --out benchmarks/results/test-durations/NAME.json

A test's seconds are its setup, call and teardown; with two workers the files' sum is about
twice the wall time. `--wall` records the wall time the caller measured (`time .ci/run`).
"""

from __future__ import annotations

import argparse
import collections
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from common import save


def summarize(junit: Path) -> dict[str, Any]:
    """Counts, each file's seconds (largest first) and the 15 slowest tests of a JUnit report."""
    per_file: collections.Counter[str] = collections.Counter()
    tests: list[tuple[float, str]] = []
    outcome = collections.Counter()
    for case in ET.parse(junit).getroot().iter("testcase"):
        module, name, seconds = case.get("classname", ""), case.get("name", ""), case.get("time")
        path = module.replace(".", "/") + ".py"
        per_file[path] += float(seconds or 0.0)
        tests.append((float(seconds or 0.0), f"{path}::{name}"))
        if case.find("skipped") is not None:
            outcome["skipped"] += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            outcome["failed"] += 1
        else:
            outcome["passed"] += 1
    return {
        "tests": dict(outcome),
        "sum_seconds": round(sum(per_file.values()), 1),
        "per_file_seconds": {f: round(s, 1) for f, s in per_file.most_common()},
        "slowest": [{"test": t, "seconds": round(s, 1)} for s, t in sorted(tests)[::-1][:15]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junit", default="runs/pytest.xml", help="make test's JUnit XML")
    parser.add_argument("--wall", type=float, help="the wall seconds of the run, measured outside")
    parser.add_argument("--command", default="time .ci/run", help="what was timed, as recorded")
    parser.add_argument("--out", help="write the JSON here (else print the table only)")
    args = parser.parse_args()
    result = summarize(Path(args.junit))
    result |= {"wall_seconds": args.wall, "command": args.command}
    print("| file | seconds |\n|---|---|")
    for path, seconds in result["per_file_seconds"].items():
        print(f"| `{path}` | {seconds:.0f} |")
    print(f"| sum | {result['sum_seconds']:.0f} |")
    if args.out:
        save(args.out, result)


if __name__ == "__main__":
    main()
