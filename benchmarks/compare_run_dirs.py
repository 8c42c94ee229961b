"""Compare two run directories file by file: which Parquet columns, checkpoint weights and
config.yaml differ (the check that a refactor leaves a seeded run unchanged).

    python benchmarks/compare_run_dirs.py RUN_DIR_A RUN_DIR_B
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import pandas as pd


def _digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def differences(a: Path, b: Path) -> list[str]:
    """One line per file that is missing on one side or differs (Parquet: the columns)."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    out = [f"{rel}: only in one run directory" for rel in sorted(files_a ^ files_b)]
    for rel in sorted(files_a & files_b):
        x, y = a / rel, b / rel
        if rel.suffix == ".parquet":
            left, right = pd.read_parquet(x), pd.read_parquet(y)
            if list(left.columns) != list(right.columns):
                out.append(f"{rel}: other columns")
                continue
            cols = [c for c in left.columns if not left[c].astype(str).equals(right[c].astype(str))]
            if cols:
                out.append(f"{rel}: {', '.join(cols)}")
        elif rel.suffix in (".safetensors", ".yaml") and _digest(x) != _digest(y):
            out.append(f"{rel}: differs")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args()
    found = differences(args.a, args.b)
    print(f"{len(found)} file(s) differ")
    print("\n".join(found))


if __name__ == "__main__":
    main()
