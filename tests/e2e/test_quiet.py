"""A training run is quiet: progress lines, stage states and results, no Python warnings and no
weight-loading bars, with a cold model cache (tiny models built on first use) as with a warm one.

The run has warnings raised from rlanything's own modules, and every FutureWarning (the
deprecations a library announces before it breaks a call of ours), turned into errors, so a
deprecated call fails this test before the library removes it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rlanything_core.base.paths import cache_root
from rlanything_core.models.loading import resolve_source

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, warnings
warnings.filterwarnings("error", module=r"rlanything_(core|flows|tasks)")
warnings.filterwarnings("error", category=FutureWarning)
from rlanything_flows.cli import main
sys.exit(main(sys.argv[1:]))
"""


def train(tmp_path: Path, run: str) -> str:
    """Output of one round of configs/tiny.yaml in `tmp_path` (its model cache included)."""
    env = os.environ | {
        "RLANYTHING_CACHE": str(tmp_path / "cache"),
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    args = ["train", "--config", str(ROOT / "configs" / "tiny.yaml"), "--rounds", "1"]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args, "--run-dir", str(tmp_path / run)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return output


def test_a_run_prints_no_warning_with_a_cold_and_a_warm_model_cache(tmp_path: Path) -> None:
    """The cold cache lacks the tiny base model and the warm-started policy, so the run builds
    both; the judge and the environment model, built by the same code (`ensure_warm_tiny_model`)
    in two minutes more, are copied in from the session's cache."""
    for source in ("tiny-judge:0", "tiny-envmodel:0"):
        built = Path(resolve_source(source))
        shutil.copytree(built, tmp_path / "cache" / built.relative_to(cache_root()))
    for run in ("cold", "warm"):
        output = train(tmp_path, run)
        noisy = [
            line
            for line in output.splitlines()
            if "Warning" in line or "deprecated" in line or "it/s]" in line
        ]
        assert not noisy, f"{run} cache: {noisy[:5]}"
        assert "round 0 rollout" in output, output[-2000:]
