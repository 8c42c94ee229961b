"""Screenshots of the Prefect and MLflow UIs from a real run, for the README.

Starts a Prefect server and an MLflow server on local ports, trains `configs/tiny.yaml` (with a
held-out evaluation after each round, which moves the alias `best`) against them with
`rlanything train`, and saves in headless Chromium (Playwright, /usr/bin/chromium):

- docs/prefect-round-graph.png: a round's flow run, its seven stages and their edges;
- docs/mlflow-round-lineage.png: that round's MLflow run, its datasets (role, sha256, stage)
  listed, in the model-training view;
- docs/mlflow-registered-model.png: the registered policy model, its versions and `best`.

    python docs/screenshots.py            # about 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from playwright.sync_api import Page, sync_playwright

from rlanything_core.models.services import Service, free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def shoot(
    page: Page, url: str, wait_for: str, out: Path, settle: float = 3.0, click: str | None = None
) -> None:
    """Open `url`, wait for `wait_for`, click `click` if given, and save the page as `out`."""
    page.goto(url)
    page.wait_for_selector(wait_for, timeout=120_000)
    if click is not None:
        page.click(click)
    time.sleep(settle)  # canvases and charts draw after the DOM is there
    page.screenshot(path=str(out))
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlanything-screens-"))
    prefect_port, mlflow_port = free_port(), free_port()
    api = f"http://127.0.0.1:{prefect_port}/api"
    store = f"sqlite:///{work / 'mlflow.db'}"
    env = os.environ | {
        "PREFECT_HOME": str(work / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_URL": api,
        "MLFLOW_TRACKING_URI": store,
        "RLANYTHING_DATA": str(work / "data"),
    }
    prefect = Service(
        [str(BIN / "prefect"), "server", "start", "--port", str(prefect_port)],
        port=prefect_port,
        env=env,
        startup_timeout_s=300,
        health_path="/api/health",
    )
    serve = ["server", "--backend-store-uri", store, "--port", str(mlflow_port)]
    mlflow = Service(
        [str(BIN / "mlflow"), *serve, "--host", "127.0.0.1"],
        port=mlflow_port,
        env=env,
        startup_timeout_s=300,
    )
    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config["evaluation"] = {"num_tasks": 4, "rollouts_per_task": 2, "every": 1}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    with prefect:
        run = work / "run"
        train = ["train", "--config", str(work / "config.yaml"), "--run-dir", str(run)]
        subprocess.run(
            [str(BIN / "rlanything"), *train],
            env=env,
            check=True,
        )
        summary = json.loads((run / "summary.json").read_text())
        parent_flow = summary["prefect_flow_run_ids"][-1]
        rounds = httpx.post(
            f"{api}/flow_runs/filter",
            json={"flow_runs": {"parent_flow_run_id": {"any_": [parent_flow]}}},
        ).json()
        round_flow = next(r["id"] for r in rounds if r["name"] == "round-1")
        with mlflow:
            import mlflow as ml

            client = ml.MlflowClient(store)
            parent = client.get_run(summary["mlflow_run_id"])
            experiment = parent.info.experiment_id
            (round_run,) = client.search_runs(
                [experiment],
                filter_string=(
                    f"tags.mlflow.parentRunId = '{parent.info.run_id}' "
                    "and tags.`rlanything.round` = '1'"
                ),
            )
            ui = f"http://127.0.0.1:{mlflow_port}/#"
            view = "?workflowType=machine_learning"  # MLflow 3.17 opens its GenAI view otherwise
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium")
                page = browser.new_page(viewport={"width": 1500, "height": 950})
                shoot(
                    page,
                    f"http://127.0.0.1:{prefect_port}/runs/flow-run/{round_flow}",
                    "canvas",
                    args.out / "prefect-round-graph.png",
                    settle=6.0,
                )
                shoot(
                    page,
                    f"{ui}/experiments/{experiment}/runs/{round_run.info.run_id}{view}",
                    "text=Datasets",
                    args.out / "mlflow-round-lineage.png",
                    click="text=/^\\+\\d+$/",  # "+9": the drawer with every dataset of the round
                )
                shoot(
                    page,
                    f"{ui}/models/rlanything-tiny-policy{view}",
                    "text=Version 2",
                    args.out / "mlflow-registered-model.png",
                )
                browser.close()


if __name__ == "__main__":
    main()
