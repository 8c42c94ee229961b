"""Engines: `rlanything serve` started as a real server process, the OpenAI-compatible client
against it (same answers as the in-process engine, adapter loading and reloading, clear errors)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlanything_core.base.generation import Messages
from rlanything_core.method.prompts import judge_messages
from rlanything_core.models.engines import EngineError, HFEngine, OpenAIEngine
from rlanything_core.models.loading import load_model
from rlanything_core.models.services import Service, ServiceError, free_port

PROMPTS: list[Messages] = [
    judge_messages("put a mug in cabinet", [], f"You see {i} things.", "I go.", "look", "Ok.")
    for i in range(10)
]
SEEDS = list(range(100, 110))
SAMPLE = {"max_new_tokens": 12, "temperature": 1.0, "batch_size": 4}


def _adapter(base: str, out: Path, seed: int) -> Path:
    """A LoRA adapter on `base` with random non-zero weights (a trained adapter's shape)."""
    peft, _ = load_model(base, device="cpu", trainable=True, lora_rank=4, lora_alpha=8)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    peft.save_pretrained(out)
    return out


def _texts(engine: HFEngine | OpenAIEngine) -> list[list[int]]:
    return [g.token_ids for g in engine.generate(PROMPTS, SEEDS, **SAMPLE)]  # type: ignore[arg-type]


def test_served_answers_equal_the_in_process_engine(served: Service, base: str) -> None:
    model, tokenizer = load_model(base, device="cpu")
    local = HFEngine(model, tokenizer).generate(PROMPTS, SEEDS, **SAMPLE)  # type: ignore[arg-type]
    remote = OpenAIEngine(served.url, "judge", tokenizer, concurrency=4).generate(
        PROMPTS,
        SEEDS,
        **SAMPLE,  # type: ignore[arg-type]
    )
    for a, b in zip(local, remote, strict=True):
        assert (a.text, a.token_ids, a.prompt_token_ids, a.finish_reason) == (
            b.text,
            b.token_ids,
            b.prompt_token_ids,
            b.finish_reason,
        )
        # the same samples; log-probs equal up to float noise of batching
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)


def test_adapter_load_and_reload_between_rounds(served: Service, base: str, tmp_path: Path) -> None:
    _, tokenizer = load_model(base, device="cpu")
    engine = OpenAIEngine(served.url, "judge", tokenizer)
    base_answers = _texts(engine)
    for round_idx in range(2):  # a new adapter under the same name after each policy update
        path = _adapter(base, tmp_path / f"round_{round_idx}", seed=round_idx)
        engine.load_adapter("policy", str(path))
        assert engine.model == "policy" and "policy" in engine.served_models()
        local = HFEngine(*load_model(str(path), device="cpu"))
        assert _texts(engine) == _texts(local)
        assert _texts(engine) != base_answers


def test_clear_errors(served: Service, base: str) -> None:
    _, tokenizer = load_model(base, device="cpu")
    with pytest.raises(EngineError, match=r"does not serve a model named 'nope'.*judge"):
        OpenAIEngine(served.url, "nope", tokenizer).generate(PROMPTS[:1], SEEDS[:1], **SAMPLE)  # type: ignore[arg-type]
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineError, match="cannot reach"):
        OpenAIEngine(dead, "judge", tokenizer, retries=1, backoff_s=0.01).generate(
            PROMPTS[:1],
            SEEDS[:1],
            **SAMPLE,  # type: ignore[arg-type]
        )
    with pytest.raises(EngineError, match="HTTP 404"):
        OpenAIEngine(served.url, "judge", tokenizer).load_adapter("x", "/nonexistent")
    # Keys held to a set are asked of the server as a JSON-schema response format (vLLM's
    # structured outputs); `rlanything serve` does not implement it and says so.
    with pytest.raises(EngineError, match="unsupported parameter 'response_format'"):
        OpenAIEngine(served.url, "judge", tokenizer).generate(
            PROMPTS[:1],
            SEEDS[:1],
            **SAMPLE,
            json_keys=["seed"],  # type: ignore[arg-type]
        )
    with pytest.raises(ServiceError, match="exited with code"):
        Service(["python3", "-c", "raise SystemExit(3)"], port=free_port()).start()
