"""On a CUDA device: the GPU computes what the CPU computes, within stated bounds, and the tiny
config trains end to end on it. Skipped where there is no CUDA device (CI has none); run on a GPU
machine with `python -m pytest -m gpu -v` (results in benchmarks/results/gpu/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlanything_core.base.generation import Messages
from rlanything_core.method.prompts import policy_messages
from rlanything_core.models.checkpoints import save_checkpoint
from rlanything_core.models.config import UpdateConfig
from rlanything_core.models.loading import load_model, resolve_source
from rlanything_core.models.modelling import (
    TrainSample,
    encode_chat,
    generate,
    response_logprobs,
    with_eos,
)
from rlanything_core.models.training import rl_update
from rlanything_core.run.config import RunConfig, load_config
from rlanything_core.run.rundir import RunDir

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ["go to desk 1", "open drawer 2", "take mug 1 from shelf 3", "look"]
GOALS = ["take the mug", "open the drawer", "look around the study", "go to the desk"]


def _prompts() -> list[Messages]:
    return [policy_messages(g, [], "You are in the study.", ACTIONS) for g in GOALS]


def _masked_logp(model: torch.nn.Module, tok: object, pairs: list[tuple[list[int], list[int]]]):
    """(B, R) log-probs of each response, on the CPU, and the (B, R) mask of real tokens."""
    with torch.no_grad():
        logp, mask = response_logprobs(
            model,  # type: ignore[arg-type]
            [p for p, _ in pairs],
            [r for _, r in pairs],
            temperature=1.0,
            pad_id=tok.pad_token_id,  # type: ignore[attr-defined]
        )
    return logp.float().cpu(), mask.cpu().bool()


def test_log_probs_on_cuda_are_the_cpu_ones() -> None:
    """The same responses scored on the CPU and on the GPU (rows of different lengths, so the
    padding and the shared prefix are exercised): float32 within 1e-3 nats per token, bfloat16
    within 0.1 nats on average (bfloat16 keeps 8 bits of mantissa)."""
    cpu_model, tok = load_model("tiny", device="cpu", dtype="float32")
    eos = tok.eos_token_id
    pairs = []
    for k, messages in enumerate(_prompts()):
        answer = tok(f"\\boxed{{{k + 1}}} " * (k + 1), add_special_tokens=False)["input_ids"]
        pairs.append((encode_chat(tok, messages), with_eos(answer, eos)))
    reference, mask = _masked_logp(cpu_model, tok, pairs)
    for dtype, mean_bound, max_bound in (("float32", 1e-4, 1e-3), ("bfloat16", 0.1, 1.0)):
        gpu_model, _ = load_model("tiny", device="cuda", dtype=dtype)
        assert next(gpu_model.parameters()).device.type == "cuda"
        logp, gpu_mask = _masked_logp(gpu_model, tok, pairs)
        assert torch.equal(gpu_mask, mask)
        diff = (logp - reference)[mask].abs()
        print(f"{dtype}: mean |Δ log p| {float(diff.mean()):.2e}, max {float(diff.max()):.2e}")
        assert float(diff.mean()) < mean_bound and float(diff.max()) < max_bound, dtype


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sampling_on_cuda_gives_the_log_probs_the_update_recomputes(dtype: str) -> None:
    """Seeded sampling on the GPU is reproducible, and the sampler's log-probs (which the update
    may reuse as the old log-probs) are those `response_logprobs` recomputes on the same model:
    within 1e-3 nats in float32, 0.1 on average in bfloat16."""
    model, tok = load_model("tiny", device="cuda", dtype=dtype)
    prompts = _prompts() * 4
    seeds = list(range(len(prompts)))
    first = generate(model, tok, prompts, seeds, max_new_tokens=12, temperature=1.0, batch_size=8)
    again = generate(model, tok, prompts, seeds, max_new_tokens=12, temperature=1.0, batch_size=8)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    logp, mask = _masked_logp(model, tok, [(g.prompt_token_ids, g.token_ids) for g in first])
    sampled = torch.zeros_like(logp)
    for i, g in enumerate(first):
        sampled[i, : len(g.logprobs)] = torch.tensor(g.logprobs)
    diff = (logp - sampled)[mask].abs()
    print(f"{dtype}: mean |Δ log p| {float(diff.mean()):.2e}, max {float(diff.max()):.2e}")
    mean_bound, max_bound = (1e-4, 1e-3) if dtype == "float32" else (0.1, 1.0)
    assert float(diff.mean()) < mean_bound and float(diff.max()) < max_bound


def test_an_update_on_cuda_moves_the_policy_as_on_the_cpu(tmp_path: Path) -> None:
    """rl_update of one sample (advantage +1, one AdamW step) in float32 on the CPU and on the
    GPU: the same loss, and the response's log-prob rises by the same amount within 2 %."""
    model, tok = load_model("tiny", device="cpu", dtype="float32")
    start = save_checkpoint(model, tok, tmp_path / "start")
    prompt = encode_chat(tok, _prompts()[0])
    response = with_eos(tok("\\boxed{3}", add_special_tokens=False)["input_ids"], tok.eos_token_id)
    update = UpdateConfig(lr=1e-3, optimizer_steps=1, micro_batch_size=1)
    before, _ = _masked_logp(model, tok, [(prompt, response)])
    rises, losses = {}, {}
    for device in ("cpu", "cuda"):
        metrics = rl_update(
            str(start),
            tmp_path / device,
            lambda _eos: [TrainSample(prompt, response, 1.0)],
            update,
            device=device,
            dtype="float32",
            temperature=1.0,
            seed=0,
        )
        after_model, _ = load_model(str(tmp_path / device), device="cpu", dtype="float32")
        after, _ = _masked_logp(after_model, tok, [(prompt, response)])
        rises[device], losses[device] = float((after - before).sum()), metrics["loss"]
    print(f"log-prob rise {rises}, loss {losses}")
    assert rises["cpu"] > 1e-3
    assert abs(rises["cuda"] - rises["cpu"]) < 0.02 * rises["cpu"], rises
    assert abs(losses["cuda"] - losses["cpu"]) < 1e-4, losses


@pytest.mark.usefixtures("prefect_harness")
def test_two_rounds_of_the_tiny_config_train_on_cuda(tmp_path: Path) -> None:
    """configs/tiny.yaml with every model on the GPU: both rounds finish every stage on it, and
    the policy's and the RM's checkpoints move from where they started and load on a CPU."""
    from rlanything_flows.train import rlanything_train

    data = load_config(ROOT / "configs" / "tiny.yaml").model_dump()
    for role in ("policy", "reward_model", "env_model"):
        data[role]["model"]["device"] = "cuda"
    config = RunConfig.model_validate(data)
    run = RunDir(tmp_path / "run")
    torch.cuda.reset_peak_memory_stats()
    summary = rlanything_train(config=config, run_dir=str(run.root))
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    assert torch.cuda.max_memory_allocated() > 0  # the stages ran in this process, on the GPU
    for role in ("policy", "reward_model"):
        source = Path(resolve_source(getattr(config, role).model.source))
        start = load_file(str(source / "model.safetensors"))
        end = load_file(str(run.checkpoint(role, 1) / "model.safetensors"))
        assert any(not torch.equal(start[k], end[k]) for k in start), role
        load_model(str(run.checkpoint(role, 1)), device="cpu")
