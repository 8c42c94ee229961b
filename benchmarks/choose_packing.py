"""Scoring the admissible answers of a choosing policy (`modelling.choose_answers`): each
prompt's answers packed into one row behind a 4D mask over its KV cache, against a copy of the
prompt's KV cache per answer (the path kept for models whose attention cannot take the mask).

The prompts and answers are the policy's on held-out tasks of the config's environment, played
with random admissible answers (each distinct prompt once), batched as `choose_answers` groups
them (at most `policy.model.batch_size` answers a forward pass). Alternating, the median seconds
to score every answer of every prompt both ways, and the largest difference of a token log-prob.

    python benchmarks/choose_packing.py --config configs/learning-household.yaml \
        --out benchmarks/results/choose-packing-household.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import torch
from common import bench_config, save

from rlanything_core.models import modelling
from rlanything_core.models.loading import load_model


def played_steps(config_path: str, tasks: int, tokenizer: Any) -> list[tuple[list[int], list[str]]]:
    """(prompt ids, admissible answers) of each distinct step of `tasks` held-out tasks played
    with random admissible answers."""
    config = bench_config(config_path)
    env = config.environment.env
    rng = random.Random(0)
    steps: dict[tuple[int, ...], list[str]] = {}
    for spec in env.generate("id", tasks, seed=7):
        episode = env.new_episode(spec, None, None)
        while not episode.done:
            answers = list(episode.answers())  # type: ignore[attr-defined]
            ids = tuple(modelling.encode_chat(tokenizer, episode.messages()))
            steps.setdefault(ids, answers)
            episode.act(rng.choice(answers))
    return [(list(p), a) for p, a in steps.items()]


def batches(
    steps: list[tuple[list[int], list[str]]], tokenizer: Any, size: int
) -> list[tuple[list[list[int]], list[list[list[int]]]]]:
    """The steps in `choose_answers`'s groups (`modelling.answer_groups`)."""
    eos = tokenizer.eos_token_id
    prompts = [p for p, _ in steps]
    tokens = [
        [[*tokenizer(a, add_special_tokens=False)["input_ids"], eos] for a in answers]
        for _, answers in steps
    ]
    return [
        ([prompts[i] for i in group], [tokens[i] for i in group])
        for group in modelling.answer_groups(prompts, tokens, size)
    ]


def measure(config_path: str, tasks: int, repeats: int) -> dict[str, Any]:
    config = bench_config(config_path)
    pm = config.policy.model
    model, tokenizer = load_model(pm.source, device=pm.device, dtype=pm.dtype)
    model.eval()
    steps = played_steps(config_path, tasks, tokenizer)
    groups = batches(steps, tokenizer, pm.batch_size)
    ways = {"packed": modelling._packed_answer_logprobs, "cache_copy": modelling._answer_logprobs}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    scored: dict[str, list[list[list[list[float]]]]] = {}
    with torch.no_grad():
        for _ in range(repeats + 1):  # the first pair warms up
            for name, score in ways.items():
                start = time.perf_counter()
                scored[name] = [
                    score(model, p, a, temperature=pm.temperature, pad_id=tokenizer.pad_token_id)
                    for p, a in groups
                ]
                seconds[name].append(time.perf_counter() - start)
    differences = [
        abs(x - y)
        for g, h in zip(scored["packed"], scored["cache_copy"], strict=True)
        for per_prompt, other in zip(g, h, strict=True)
        for answer, same in zip(per_prompt, other, strict=True)
        for x, y in zip(answer, same, strict=True)
    ]
    packed, copied = (statistics.median(seconds[n][1:]) for n in ("packed", "cache_copy"))
    answers = [len(a) for _, a in steps]
    prompt_tokens = [len(p) for p, _ in steps]
    return {
        "benchmark": "choose_packing",
        "config": config_path,
        "model": pm.source,
        "dtype": str(next(model.parameters()).dtype),
        "torch_threads": torch.get_num_threads(),
        "distinct_prompts": len(steps),
        "prompt_tokens": [min(prompt_tokens), statistics.median(prompt_tokens), max(prompt_tokens)],
        "answers_per_prompt": [min(answers), statistics.median(answers), max(answers)],
        "answers_per_forward": pm.batch_size,
        "forward_groups": len(groups),
        "repeats": repeats,
        "packed_seconds": round(packed, 3),
        "cache_copy_seconds": round(copied, 3),
        "speedup": round(copied / packed, 3),
        "max_logprob_difference": max(differences),
        "token_logprobs_compared": len(differences),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/learning-household.yaml")
    parser.add_argument("--tasks", type=int, default=16, help="held-out tasks to play")
    parser.add_argument("--repeats", type=int, default=3, help="timed pairs after a warm-up")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    save(args.out, measure(args.config, args.tasks, args.repeats))


if __name__ == "__main__":
    main()
