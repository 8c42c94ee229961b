"""The Prefect deployment file points at the training flow and its parameters are a valid config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlanything_core.run.config import ConfigError, load_config
from rlanything_flows.train import pick_config, rlanything_train

ROOT = Path(__file__).resolve().parents[2]


def test_deployment_entrypoint_and_parameters() -> None:
    spec = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    deployments = {d["name"]: d for d in spec["deployments"]}
    assert set(deployments) == {"nightly-tiny", "gpu-node"}
    for deployment in deployments.values():
        module, _, name = deployment["entrypoint"].partition(":")
        assert (ROOT / module).is_file() and name == rlanything_train.fn.__name__
    nightly = deployments["nightly-tiny"]
    assert nightly["schedules"][0]["cron"] == "0 2 * * *"
    # every night trains a run directory of its own (tests/flows/test_flows.py checks the expansion)
    assert "{date}" in nightly["parameters"]["run_dir"]
    assert "{flow_run_name}" in nightly["parameters"]["run_dir"]
    # the config is a file of the clone, by path; no pull step: workers run in the clone
    assert nightly["parameters"]["config_file"] == "configs/nightly-tiny.yaml"
    nightly_config = load_config(ROOT / nightly["parameters"]["config_file"])
    assert nightly_config.rounds >= 1
    assert nightly_config.evaluation.every == 1  # so the registered models get `best`
    assert deployments["gpu-node"]["parameters"]["config_file"] == "configs/gpu-node.yaml"
    assert load_config(ROOT / "configs" / "gpu-node.yaml").policy.model.engine is not None
    assert spec["pull"] is None


def test_config_is_given_once() -> None:
    tiny = load_config(ROOT / "configs" / "tiny.yaml")
    assert pick_config(None, str(ROOT / "configs" / "tiny.yaml")) == tiny
    assert pick_config(tiny, None) is tiny
    for config, path in ((None, None), (tiny, "configs/tiny.yaml")):
        with pytest.raises(ConfigError, match="either as `config` or as `config_file`"):
            pick_config(config, path)
    with pytest.raises(ConfigError, match="does not exist"):
        pick_config(None, "configs/no-such.yaml")


def test_flow_parameters_render_as_a_form() -> None:
    schema = rlanything_train.parameters.model_dump()
    assert set(schema["properties"]) == {"config", "run_dir", "config_file"}
    definitions = schema["definitions"]
    assert "RunConfig" in definitions and "mode" in definitions["RunConfig"]["properties"]
