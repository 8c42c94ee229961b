"""Distributed updates: 2 gloo processes (torchrun) give the single-process update.

Tolerance: parameters agree within atol 1e-5 + rtol 1e-4 after two AdamW steps. The processes
pad and sum in a different order than one process does, so float rounding differs; a real
mistake in the sharding or the loss weights moves parameters by about the learning rate (1e-3).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlanything_core.models.config import DistributedConfig, UpdateConfig
from rlanything_core.models.modelling import TrainSample
from rlanything_core.models.training import rl_update

SOURCE = "tiny-policy:0"


def _samples(prefix: bool = True) -> list[TrainSample]:
    """11 samples: with 2 optimizer steps of micro-batches of 2, one process runs short and pads.
    With `prefix` the first 8 share a 20-token prefix (a system prompt), which a micro-batch
    computes once (`response_logprobs`; not under FSDP)."""
    g = torch.Generator().manual_seed(0)
    shared = torch.randint(5, 60, (20,), generator=g).tolist()
    return [
        TrainSample(
            prompt_ids=(shared if prefix and i < 8 else [])
            + torch.randint(5, 60, (3 + i % 4,), generator=g).tolist(),
            response_ids=torch.randint(5, 60, (2 + i % 3,), generator=g).tolist(),
            advantage=float(torch.randn(1, generator=g)),
        )
        for i in range(11)
    ]


def _update(
    out: Path,
    lora_rank: int,
    processes: int,
    strategy: str = "ddp",
    samples: bool = True,
    prefix: bool = True,
) -> dict[str, float]:
    update = UpdateConfig(
        lr=1e-3,
        lora_rank=lora_rank,
        optimizer_steps=2,
        micro_batch_size=2,
        distributed=DistributedConfig(processes=processes, strategy=strategy),
    )
    steps: list[int] = []
    metrics = rl_update(
        SOURCE,
        out,
        lambda _eos: _samples(prefix) if samples else [],
        update,
        device="cpu",
        dtype="float32",
        temperature=1.0,
        seed=3,
        on_step=steps.append,
    )
    assert sum(steps) == (2 if samples else 0)  # the processes' progress reached the caller
    return metrics


def _weights(path: Path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    assert files, f"no weights in {path}"
    return {k: v for f in files for k, v in load_file(f).items()}


@pytest.mark.parametrize(("strategy", "lora_rank"), [("ddp", 0), ("fsdp", 4)])
def test_two_process_update_equals_one_process(
    tmp_path: Path, strategy: str, lora_rank: int
) -> None:
    _update(tmp_path / "start", lora_rank, processes=2, samples=False)
    # FSDP computes every prompt whole; one process would share the prefix, which rounds
    # differently, and Adam turns a rounding difference in a gradient near 0 into a whole step.
    prefix = strategy == "ddp"
    alone = _update(tmp_path / "alone", lora_rank, processes=1, prefix=prefix)
    shared = _update(tmp_path / "shared", lora_rank, processes=2, strategy=strategy, prefix=prefix)
    a, b = _weights(tmp_path / "alone"), _weights(tmp_path / "shared")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-5, rtol=1e-4, msg=name)
    # The update moved the weights, so agreeing is not agreeing on "unchanged".
    start = _weights(tmp_path / "start")
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 1e-4
    # Adam hides a wrong gradient scale from the weights; the gradient norm shows it.
    assert alone["samples"] == shared["samples"] == 11
    assert shared["grad_norm"] == pytest.approx(alone["grad_norm"], rel=1e-4)
    assert shared["loss"] == pytest.approx(alone["loss"], abs=1e-5)


def test_a_process_lost_mid_update_is_restarted_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 aborts once after joining (SIGABRT, as a crashed gloo thread does); the update is
    started again on a fresh rendezvous and gives the weights of an undisturbed one."""
    alone = _update(tmp_path / "alone", 0, processes=1)
    ready = tmp_path / "aborted"
    monkeypatch.setenv("RLANYTHING_FAILPOINT", "update-worker/1")
    monkeypatch.setenv("RLANYTHING_FAILPOINT_READY", str(ready))
    with pytest.warns(UserWarning, match=r"exit status 1 \(attempt 1 of 2\); starting it again"):
        shared = _update(tmp_path / "shared", 0, processes=2)
    assert ready.exists()  # the process did die once
    a, b = _weights(tmp_path / "alone"), _weights(tmp_path / "shared")
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-5, rtol=1e-4, msg=name)
    assert shared["samples"] == alone["samples"] == 11


def test_a_process_that_keeps_dying_fails_the_update_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no restarts left the update fails and the error carries torchrun's output."""
    monkeypatch.setenv("RLANYTHING_FAILPOINT", "update-worker/1")
    monkeypatch.setenv("RLANYTHING_FAILPOINT_READY", str(tmp_path / "aborted"))
    update = UpdateConfig(
        lr=1e-3, micro_batch_size=2, distributed=DistributedConfig(processes=2, max_restarts=0)
    )
    with pytest.raises(RuntimeError, match=r"exit status 1 \(attempt 1 of 1\)"):
        rl_update(
            SOURCE,
            tmp_path / "out",
            lambda _eos: _samples(),
            update,
            device="cpu",
            dtype="float32",
            temperature=1.0,
            seed=3,
        )
    assert not (tmp_path / "out").exists()  # nothing half-written
