"""Warm starts kept in the user's cache: a second run with the same warm start reuses it, any
change to what decides it trains again, and the switch turns the cache off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlanything_core.run import warm_cache
from rlanything_core.run.config import RunConfig, parse_config
from rlanything_core.run.rundir import RunDir
from rlanything_tasks.warm_start import warm_start_role

ROOT = Path(__file__).resolve().parents[2]


def _config(seed: int = 0, step_slack: int = 4, **warm_start: object) -> RunConfig:
    """configs/tiny.yaml with a 3-episode policy warm start."""
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["seed"] = seed
    data["environment"]["options"]["step_slack"] = step_slack
    ws = {"enabled": True, "episodes": 3, "micro_batch_size": 8, **warm_start}
    data["policy"]["warm_start"] = ws
    return parse_config(data)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty warm-start cache for this test (the tiny base models stay in the session's)."""
    monkeypatch.setattr(warm_cache, "cache_root", lambda: tmp_path / "cache")
    return tmp_path / "cache" / "warm-starts"


def test_a_second_run_reuses_the_warm_start_and_a_changed_setting_trains_again(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config()
    first = RunDir(tmp_path / "first")
    outputs, metrics = warm_start_role(config, first, "policy")
    assert "reused from the cache" not in capsys.readouterr().out
    assert len(list(cache.iterdir())) == 1

    second = RunDir(tmp_path / "second")
    reused, reused_metrics = warm_start_role(config, second, "policy")
    assert "warm start policy: reused from the cache" in capsys.readouterr().out
    assert reused_metrics == metrics
    checkpoint = Path(outputs["policy_checkpoint"])
    assert _files(Path(reused["policy_checkpoint"])) == _files(checkpoint)
    assert Path(reused["policy_sft"]).read_bytes() == Path(outputs["policy_sft"]).read_bytes()
    assert second.warm_start_record("policy").is_file()

    # A warm-start setting, the seed: each is another entry, trained again.
    warm_start_role(_config(lr=7e-4), RunDir(tmp_path / "lr"), "policy")
    assert "reused" not in capsys.readouterr().out
    warm_start_role(_config(seed=5), RunDir(tmp_path / "seed"), "policy")
    assert "reused" not in capsys.readouterr().out
    assert len(list(cache.iterdir())) == 3


def test_the_key_follows_what_decides_the_warm_start_and_the_switch_turns_it_off(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlanything_core.run.warm_start import warm_start_demos

    config = _config()
    demos = warm_start_demos(config, "policy", config.policy.warm_start)
    key = warm_cache.warm_start_key(config, "policy", demos)
    assert warm_cache.warm_start_key(config, "policy", demos) == key
    # The switch itself does not change what is trained, so it is not in the key.
    off = _config(cache=False)
    assert warm_cache.warm_start_key(off, "policy", demos) == key
    # Environment options change the demonstrations, and so the key.
    other = _config(step_slack=5)
    other_demos = warm_start_demos(other, "policy", other.policy.warm_start)
    assert warm_cache.warm_start_key(other, "policy", other_demos) != key
    assert warm_cache.warm_start_key(config, "policy", demos[1:]) != key

    warm_start_role(off, RunDir(tmp_path / "a"), "policy")
    warm_start_role(off, RunDir(tmp_path / "b"), "policy")
    assert "reused" not in capsys.readouterr().out
    assert not cache.exists()
