"""Constrained decoding: the environment model's rewrite keys held to the spec's fields."""

from __future__ import annotations

import json

import pytest
import torch

from rlanything_core.envs.rewriting import last_json_object
from rlanything_core.models.checkpoints import make_optimizer
from rlanything_core.models.constraints import JsonKeys
from rlanything_core.models.engines import HFEngine
from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import encode_chat, with_eos
from rlanything_core.models.sft import sft_update

KEYS = ["max_steps", "nb_objects", "quest_length", "seed", "world_size"]
PROMPT = [{"role": "user", "content": "Make it harder. Answer with a JSON object."}]


@pytest.fixture(scope="module")
def tiny() -> tuple[object, object]:
    return load_model("tiny", device="cpu")


def _allowed(constraint: JsonKeys, tok: object, text: str) -> set[str]:
    """The single-token pieces allowed after `text` (written by the tokenizer)."""
    tokens = tok(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    mask = constraint.allowed(tokens, len(constraint.pieces))
    assert mask is not None
    return {constraint.pieces[i] for i in range(len(mask)) if mask[i]}


def test_only_keys_of_the_set_can_be_written_at_the_top_level(tiny: tuple[object, object]) -> None:
    _, tok = tiny
    keys = JsonKeys(tok, KEYS)  # type: ignore[arg-type]
    eos = str(tok.decode([tok.eos_token_id]))  # type: ignore[attr-defined]
    # the first characters of a key: those of the set's keys
    first = _allowed(keys, tok, '{"')
    assert {"w", "n", "q", "m", "s"} <= first and not {"o", "z", '":', eos} & first
    # inside a key: only what continues one; "nb_size" cannot be written
    inside = _allowed(keys, tok, '{"nb_')
    assert {"o", "object"} <= inside and all("objects".startswith(p) for p in inside)
    assert '":' in _allowed(keys, tok, '{"nb_objects') and '":' not in _allowed(keys, tok, '{"nb_')
    after_comma = _allowed(keys, tok, '{"world_size": 3, "')
    assert "n" in after_comma and "z" not in after_comma
    # a quoted piece that opens a key is held to the set as well
    assert '{"' in _allowed(keys, tok, "Sure: ") and '"' not in _allowed(keys, tok, '{"nb_')
    # values, nested objects and text outside an object are free
    for free in ('{"world_size": "', '{"world_size": {"', "The answer", '{"seed": 3} and "'):
        assert {"z", "o", eos} <= _allowed(keys, tok, free), free


def test_an_answer_with_a_wrong_key_is_decoded_with_a_valid_one(
    tiny: tuple[object, object],
) -> None:
    """A model fine-tuned to answer {"nb_size": 3} (a key that mixes two fields) writes a key
    of the set when its keys are constrained, and still the wrong one when they are not."""
    model, tok = tiny
    torch.manual_seed(0)
    answer = tok('{"nb_size": 3}', add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    pair = (encode_chat(tok, PROMPT), with_eos(answer, tok.eos_token_id))  # type: ignore[arg-type]
    optimizer = make_optimizer(model, 3e-3)  # type: ignore[arg-type]
    for _ in range(60):
        sft_update(model, optimizer, [pair], pad_id=tok.pad_token_id)  # type: ignore[arg-type, attr-defined]
    engine = HFEngine(model, tok)  # type: ignore[arg-type]
    free = engine.generate([PROMPT], [0], max_new_tokens=16, temperature=0.0, batch_size=1)
    assert free[0].text == '{"nb_size": 3}'
    held = engine.generate(
        [PROMPT] * 8, list(range(8)), max_new_tokens=24, temperature=1.0, batch_size=8,
        json_keys=KEYS,
    ) + engine.generate(
        [PROMPT], [0], max_new_tokens=24, temperature=0.0, batch_size=1, json_keys=KEYS
    )  # fmt: skip
    parsed = 0
    for g in held:
        found, _ = last_json_object(g.text)
        if found is not None:
            parsed += 1
            assert set(found) <= set(KEYS), g.text
        # the sampler's log-probs are those of the masked distribution: every token was allowed
        assert all(lp > float("-inf") for lp in g.logprobs)
    assert parsed >= 1
    greedy = json.loads(held[-1].text)
    assert list(greedy) == ["nb_objects"], held[-1].text
