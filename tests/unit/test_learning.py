"""Does an update move the policy the right way? The direction of one update, toy learning with
outcome-only GRPO, the optimizer kept across rounds, and the reward model warm-started on the
responses it judges at run time."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from rlanything_core.base.generation import Generation, Messages
from rlanything_core.envs.demos import judge_demonstrations, policy_answer, policy_demonstrations
from rlanything_core.envs.household import world as household
from rlanything_core.envs.interface import TaskRef, WarmStart, make_environment
from rlanything_core.method.feedback import task_level_advantages
from rlanything_core.method.parsing import parse_action, parse_action_index
from rlanything_core.method.prompts import ActionFormat, policy_messages
from rlanything_core.models.checkpoints import OPTIMIZER_STATE, make_optimizer, save_checkpoint
from rlanything_core.models.config import UpdateConfig
from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import (
    TrainSample,
    encode_chat,
    generate,
    ppo_update,
    response_logprobs,
    with_eos,
)
from rlanything_core.models.sft import forward_chunks, micro_batches, sft_update
from rlanything_core.models.training import rl_update
from rlanything_core.run.config import parse_config
from rlanything_core.run.judging import judge_prompts
from rlanything_core.run.rollout import Sampling, play

ACTIONS = ["go to desk 1", "open drawer 2", "take mug 1 from shelf 3", "look"]
GOAL, TARGET = "take the mug", 2  # the toy task: one goal, one right action among four


def _toy_prompt(goal: str) -> Messages:
    return policy_messages(goal, [], "You are in the study.", ACTIONS)


def _logp(model: torch.nn.Module, tok: object, prompt: list[int], response: list[int]) -> float:
    with torch.no_grad():
        logp, mask = response_logprobs(
            model,  # type: ignore[arg-type]
            [prompt],
            [response],
            temperature=1.0,
            pad_id=tok.pad_token_id,  # type: ignore[attr-defined]
        )
    return float((logp * mask).sum())


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_one_update_moves_log_pi_of_its_response_with_the_advantage_sign(
    tmp_path: Path, advantage: float
) -> None:
    """Through rl_update (load, select, PPO-clip step, save): a positive advantage raises
    log π(response | prompt), a negative one lowers it."""
    model, tok = load_model("tiny", device="cpu")
    start = save_checkpoint(model, tok, tmp_path / "start")
    prompt = encode_chat(tok, _toy_prompt("take the mug"))
    response = with_eos(tok("\\boxed{3}", add_special_tokens=False)["input_ids"], tok.eos_token_id)
    before = _logp(model, tok, prompt, response)
    update = UpdateConfig(lr=1e-3, optimizer_steps=1, micro_batch_size=1)
    rl_update(
        str(start),
        tmp_path / "after",
        lambda _eos: [TrainSample(prompt, response, advantage)],
        update,
        device="cpu",
        dtype="float32",
        temperature=1.0,
        seed=0,
    )
    after_model, _ = load_model(str(tmp_path / "after"), device="cpu")
    change = _logp(after_model, tok, prompt, response) - before
    assert change * advantage > 1e-3, change


def _success(model: torch.nn.Module, tok: object) -> float:
    """The probability that the policy answers the toy task right, exactly: π(right box | goal)."""
    eos = tok.eos_token_id  # type: ignore[attr-defined]
    answer = tok(policy_answer(ACTIONS, TARGET, False), add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    prompt = encode_chat(tok, _toy_prompt(GOAL))
    return math.exp(_logp(model, tok, prompt, with_eos(answer, eos)))


def _grpo_round(
    model: torch.nn.Module, tok: object, optimizer: torch.optim.Optimizer, seed: int
) -> None:
    """Outcome-only GRPO: 16 sampled answers, reward 1 for the right action and 0 otherwise,
    advantages standardized over the group, one PPO-clip update (2 mini-batches, 4 epochs)."""
    prompts = [_toy_prompt(GOAL)] * 16
    out = generate(
        model,  # type: ignore[arg-type]
        tok,  # type: ignore[arg-type]
        prompts,
        [seed * 1000 + i for i in range(len(prompts))],
        max_new_tokens=10,
        temperature=1.0,
    )
    rewards = [float(parse_action_index(g.text, len(ACTIONS)) == TARGET) for g in out]
    advantages = task_level_advantages(rewards, [0] * len(rewards))
    eos = tok.eos_token_id  # type: ignore[attr-defined]
    samples = [
        TrainSample(g.prompt_token_ids, with_eos(g.token_ids, eos), float(a))
        for g, a in zip(out, advantages, strict=True)
        if a != 0.0
    ]
    if samples:
        ppo_update(
            model,  # type: ignore[arg-type]
            optimizer,
            samples,
            pad_id=tok.pad_token_id,  # type: ignore[attr-defined]
            optimizer_steps=2,
            micro_batch_size=16,
            epochs=4,
        )


def test_outcome_only_grpo_learns_a_toy_task_in_seconds() -> None:
    """A tiny model taught the answer format with random actions (the right one about 1 in 10)
    learns from the outcome alone which action the goal wants: the optimizer kept across
    rounds, 4 PPO epochs per round, lr 3e-4. Flip the update's sign and it unlearns instead."""
    torch.manual_seed(0)
    model, tok = load_model("tiny", device="cpu", trainable=True)
    gen = torch.Generator().manual_seed(0)
    prompt = encode_chat(tok, _toy_prompt(GOAL))
    pairs = []
    for _ in range(16):  # the format only: the boxed number is drawn at random
        k = int(torch.randint(len(ACTIONS), (1,), generator=gen))
        answer = tok(policy_answer(ACTIONS, k, False), add_special_tokens=False)["input_ids"]
        pairs.append((prompt, [*answer, tok.eos_token_id]))
    sft_update(
        model, make_optimizer(model, lr=3e-3), pairs, pad_id=tok.pad_token_id, epochs=40, seed=0
    )
    start = _success(model, tok)
    assert start < 0.15, start
    optimizer = make_optimizer(model, lr=3e-4)
    for r in range(12):
        _grpo_round(model, tok, optimizer, seed=10 + r)
    end = _success(model, tok)
    assert end > 0.4 and end > start + 0.25, (start, end)


def _one_sample(tok: object) -> Callable[[int], list[TrainSample]]:
    prompt = encode_chat(tok, _toy_prompt("look around"))
    response = tok("\\boxed{4}", add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    return lambda eos: [TrainSample(prompt, with_eos(response, eos), 1.0)]


def test_the_optimizer_state_goes_on_from_round_to_round(tmp_path: Path) -> None:
    """Each RL checkpoint carries the AdamW state; the next update restores it (step counts add
    up), a round without samples passes it on unchanged, and keep_optimizer: false starts
    fresh."""
    model, tok = load_model("tiny", device="cpu")
    source = save_checkpoint(model, tok, tmp_path / "start")
    assert not (source / OPTIMIZER_STATE).exists()
    update = UpdateConfig(lr=1e-3, optimizer_steps=1, epochs=2, micro_batch_size=1)
    common = {"device": "cpu", "dtype": "float32", "temperature": 1.0, "seed": 0}
    metrics = rl_update(str(source), tmp_path / "r0", _one_sample(tok), update, **common)
    assert metrics["optimizer_steps"] == 2.0
    rl_update(str(tmp_path / "r0"), tmp_path / "r1", lambda _eos: [], update, **common)
    rl_update(str(tmp_path / "r1"), tmp_path / "r2", _one_sample(tok), update, **common)

    def steps(checkpoint: Path) -> set[float]:
        state = torch.load(checkpoint / OPTIMIZER_STATE, weights_only=True)["state"]
        return {float(s["step"]) for s in state.values()}

    assert steps(tmp_path / "r0") == {2.0}
    assert steps(tmp_path / "r1") == {2.0}  # skipped round: the state passed on unchanged
    assert steps(tmp_path / "r2") == {4.0}
    fresh = update.model_copy(update={"keep_optimizer": False})
    rl_update(str(tmp_path / "r2"), tmp_path / "r3", _one_sample(tok), fresh, **common)
    assert not (tmp_path / "r3" / OPTIMIZER_STATE).exists()


def test_warmup_scales_the_first_steps_and_goes_on_across_rounds(tmp_path: Path) -> None:
    """warmup_steps N: step k (counted in the kept optimizer's state) takes lr·(k + 1)/N. A fresh
    AdamW's first step moves each weight by about lr (m/√v = ±1), so the largest move of step
    k is lr·(k + 1)/N; after the update the state keeps the configured lr."""
    model, tok = load_model("tiny", device="cpu")
    source = save_checkpoint(model, tok, tmp_path / "start")
    lr, n = 1e-3, 4
    common = {"device": "cpu", "dtype": "float32", "temperature": 1.0, "seed": 0}

    def largest_move(before: Path, after: Path) -> float:
        a, b = load_model(str(before), device="cpu")[0], load_model(str(after), device="cpu")[0]
        return max(
            float((p - q).detach().abs().max())
            for p, q in zip(a.parameters(), b.parameters(), strict=True)
        )

    update = UpdateConfig(lr=lr, optimizer_steps=1, micro_batch_size=1, warmup_steps=n)
    for k, name in enumerate(("r0", "r1")):
        start = source if k == 0 else tmp_path / "r0"
        rl_update(str(start), tmp_path / name, _one_sample(tok), update, **common)
        assert largest_move(start, tmp_path / name) == pytest.approx(lr * (k + 1) / n, rel=0.02)
    state = torch.load(tmp_path / "r1" / OPTIMIZER_STATE, weights_only=True)
    assert state["param_groups"][0]["lr"] == lr
    plain = update.model_copy(update={"warmup_steps": 0})
    rl_update(str(source), tmp_path / "plain", _one_sample(tok), plain, **common)
    assert largest_move(source, tmp_path / "plain") == pytest.approx(lr, rel=0.02)


@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_warm_start_lr_schedule(schedule: str) -> None:
    """warm_start.lr_schedule: "linear" takes step k of T at lr·(1 − k/T); the rate is restored."""
    model, tok = load_model("tiny", device="cpu", trainable=True)
    optimizer = make_optimizer(model, lr=1e-3)
    seen: list[float] = []
    step = optimizer.step

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    optimizer.step = spy  # type: ignore[method-assign]
    prompt = encode_chat(tok, _toy_prompt("look around"))
    pairs = [(prompt, with_eos([5 + k], tok.eos_token_id)) for k in range(2)]
    sft_update(model, optimizer, pairs, pad_id=tok.pad_token_id, epochs=2, micro_batch_size=1,
               lr_schedule=schedule)  # type: ignore[arg-type]  # fmt: skip
    expected = [1e-3, 0.75e-3, 0.5e-3, 0.25e-3] if schedule == "linear" else [1e-3] * 4
    assert seen == pytest.approx(expected)
    assert optimizer.param_groups[0]["lr"] == 1e-3


@pytest.mark.parametrize("grouped", [False, True])
def test_micro_batches_cover_every_pair_once_and_grouping_cuts_padding(grouped: bool) -> None:
    """warm_start.group_by_length: the same ⌈n/size⌉ batches, each pair in exactly one, batches
    of similar lengths (far less padding than random batches), in a seeded random order."""
    lengths = [int(x) for x in np.random.default_rng(7).integers(200, 360, size=1000)]

    def padding(batches: list[np.ndarray]) -> float:
        padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
        return 1 - sum(lengths) / padded

    batches = micro_batches(lengths, 16, np.random.default_rng(0), group_by_length=grouped)
    assert len(batches) == 63 and [len(b) for b in batches].count(16) == 62
    assert sorted(int(i) for b in batches for i in b) == list(range(1000))
    again = micro_batches(lengths, 16, np.random.default_rng(0), group_by_length=grouped)
    assert all((a == b).all() for a, b in zip(batches, again, strict=True))
    random_batches = micro_batches(lengths, 16, np.random.default_rng(0), group_by_length=False)
    if grouped:
        assert padding(batches) < 0.05 < 0.15 < padding(random_batches)
        firsts = [lengths[b[0]] for b in batches]
        assert firsts != sorted(firsts)  # the batches themselves come in random order
    else:  # the order sft_update has always used: one permutation per epoch, cut in order
        order = np.random.default_rng(0).permutation(1000)
        assert all((b == order[16 * k : 16 * k + 16]).all() for k, b in enumerate(batches))


def test_saved_optimizer_state_for_another_model_is_a_clear_error(tmp_path: Path) -> None:
    model, tok = load_model("tiny", device="cpu", trainable=True)
    save_checkpoint(model, tok, tmp_path / "full", make_optimizer(model, lr=1e-3))
    lora, _ = load_model("tiny", device="cpu", trainable=True, lora_rank=4)
    with pytest.raises(ValueError, match="keep_optimizer: false"):
        make_optimizer(lora, lr=1e-3, resume_from=tmp_path / "full")  # another number
    optimizer = make_optimizer(lora, lr=1e-3)
    sum((p**2).sum() for p in lora.parameters() if p.requires_grad).backward()
    optimizer.step()  # AdamW keeps per-parameter moments from its first step on
    save_checkpoint(lora, tok, tmp_path / "rank4", optimizer)
    other, _ = load_model("tiny", device="cpu", trainable=True, lora_rank=8)
    with pytest.raises(ValueError, match="other shapes"):
        make_optimizer(other, lr=1e-3, resume_from=tmp_path / "rank4")  # same number, other shapes


class _Expert:
    """An engine that answers every prompt with the expert's action of a reference episode."""

    def __init__(self, spec: household.HouseholdSpec, action_format: ActionFormat) -> None:
        self.episode = household.HouseholdEpisode(spec)
        self.action_format = action_format

    def generate(
        self, prompts: Sequence[Messages], seeds: Sequence[int], **_: object
    ) -> list[Generation]:
        assert len(prompts) == 1
        actions = self.episode.actions
        k = actions.index(self.episode.expert_action())
        self.episode.step(k)
        answer = policy_answer(actions, k, False, self.action_format)
        return [Generation(answer, [1], [2], [0.0], "stop")]

    def decode(self, token_ids: Sequence[int]) -> str:
        return ""


def _expert_rollout(
    spec: object, env: object, action_format: ActionFormat
) -> list[dict[str, object]]:
    """One episode of the household expert on `spec`, answering in `action_format`."""
    return play(
        _Expert(spec, action_format),  # type: ignore[arg-type]
        env,  # type: ignore[arg-type]
        [TaskRef("demo-000", 1, spec)],  # type: ignore[arg-type]
        rollouts_per_task=1,
        round_idx=0,
        base_seed=0,
        checkpoint="expert",
        sampling=Sampling(1.0, 8, 1),
    )


@pytest.mark.parametrize(
    ("history_steps", "action_format"), [(0, "number"), (2, "number"), (0, "text")]
)
def test_the_reward_model_warm_start_shows_the_prompts_it_judges_at_run_time(
    history_steps: int, action_format: ActionFormat
) -> None:
    """Judge warm-start prompts equal the prompts reward scoring builds from a rollout of the
    same steps, the policy answering in its warm-started format (a bare box holding the action's
    number or its text)."""
    import pandas as pd

    spec = household.generate_specs("id", 1, seed=4)[0]
    options = {"history_steps": history_steps, "action_format": action_format}
    env = make_environment("household", options, "id")[0]
    demos = judge_demonstrations(
        [spec],
        household.HouseholdEpisode,
        noise=0.0,
        label_noise=0.0,
        history_steps=history_steps,
        seed=0,
        explain=False,
        action_format=action_format,
    )
    rows = _expert_rollout(spec, env, action_format)
    assert all(rows[i]["action_valid"] for i in range(len(rows)))  # the box was understood
    assert rows[-1]["outcome"] == 1
    at_run_time = judge_prompts(pd.DataFrame(rows), env)
    assert len(demos) == len(at_run_time) > 1
    assert [list(d.prompt) for d in demos] == [list(p) for p in at_run_time]
    if action_format == "text":
        assert "\\boxed{go to " in at_run_time[0][1]["content"]


def test_chosen_verdicts_are_drawn_by_the_reward_models_probability_of_writing_them() -> None:
    """`reward_model.answers: choose`: every vote is one of the verdict answers, parsed as its
    box says, reproducible from its seed; on one step, 1000 votes land on each verdict about as
    often as softmax of the RM's summed log-probs of writing it (answer + EOS), computed here
    with a plain forward pass."""
    import pandas as pd

    from rlanything_core.models.engines import HFEngine
    from rlanything_core.run.judging import judge

    spec = household.generate_specs("id", 1, seed=4)[0]
    env = make_environment("household", {"action_format": "text"}, "id")[0]
    rows = _expert_rollout(spec, env, "text")
    rollouts = pd.DataFrame(rows[:1])
    model, tok = load_model("tiny", device="cpu")
    verdicts = ["\\boxed{+1}", "\\boxed{-1}"]
    kwargs = {"round_idx": 0, "checkpoint": "tiny", "temperature": 1.0, "max_new_tokens": 24}
    votes = judge(
        HFEngine(model, tok), rollouts, votes=1000, base_seed=7, batch_size=64, env=env,
        verdicts=verdicts, **kwargs,
    )  # fmt: skip
    again = judge(
        HFEngine(model, tok), rollouts, votes=1000, base_seed=7, batch_size=16, env=env,
        verdicts=verdicts, **kwargs,
    )  # fmt: skip
    assert [v["reasoning"] for v in votes] == [v["reasoning"] for v in again]
    assert {v["reasoning"] for v in votes} <= set(verdicts)
    for v in votes:
        assert v["verdict"] == (1 if v["reasoning"] == verdicts[0] else -1)
        assert v["finish_reason"] == "stop"
    prompt = judge_prompts(rollouts, env)[0]
    ids = [[*tok(a, add_special_tokens=False)["input_ids"], tok.eos_token_id] for a in verdicts]
    logp, _ = response_logprobs(
        model, [encode_chat(tok, prompt)] * 2, ids, temperature=1.0, pad_id=tok.pad_token_id
    )
    lengths = torch.tensor([len(a) for a in ids])
    mask = torch.arange(logp.shape[1])[None, :] < lengths[:, None]
    probs = torch.softmax((logp * mask).sum(-1), 0)
    share = sum(v["verdict"] == 1 for v in votes) / len(votes)
    # Two answers of equal length that this untrained RM writes with probabilities 0.40 and
    # 0.60: 1000 draws (4 binomial standard deviations of a share are at most 0.064) tell them
    # from a constant verdict and from a fair coin.
    assert 0.3 < float(probs[0].detach()) < 0.45, probs
    assert abs(share - float(probs[0].detach())) < 0.064, (share, probs)
    assert [list(v["response_token_ids"]) for v in votes[:2]] == [
        ids[verdicts.index(v["reasoning"])] for v in votes[:2]
    ]


def test_chosen_verdicts_need_an_in_process_judge_and_parsable_answers() -> None:
    base = {"environment": {"name": "household"}, "mode": "reward"}
    with pytest.raises(ValueError, match=r"reward_model.answers: choose scores every verdict"):
        parse_config(
            base | {"reward_model": {"answers": "choose", "model": {"engine": {"kind": "openai",
                    "url": "http://localhost:1"}}}}
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"unparsable: \['Progress.'\]"):
        parse_config(
            base
            | {"reward_model": {"answers": "choose", "verdicts": ["Progress.", "No \\boxed{-1}"]}}
        )
    config = parse_config(base | {"reward_model": {"answers": "choose"}})
    assert config.reward_model.verdicts == ("Progress. \\boxed{1}", "No progress. \\boxed{-1}")


def test_text_answers_are_taught_on_prompts_that_list_the_actions_by_name() -> None:
    """With `action_format: text` the warm start's prompt lists the actions unnumbered, and its
    answer is the expert's action in a box, which the rollout parser maps back to that action."""
    spec = household.generate_specs("id", 1, seed=4)[0]
    demos = policy_demonstrations(
        [spec],
        household.HouseholdEpisode,
        noise=0.0,
        history_steps=0,
        seed=0,
        explain=False,
        action_format="text",
    )
    episode = household.HouseholdEpisode(spec)
    for demo in demos:
        actions = episode.actions
        expert = actions.index(episode.expert_action())
        assert demo.answer == f"\\boxed{{{actions[expert]}}}"
        assert "- " + actions[expert] in demo.prompt[1]["content"]
        assert "\n1. " not in demo.prompt[1]["content"]  # no numbered list
        assert "copied exactly" in demo.prompt[0]["content"]
        assert parse_action(demo.answer, actions, "text") == expert
        episode.step(expert)
    assert episode.success


def test_answer_noise_answers_a_fraction_of_the_same_prompts_with_a_random_admissible_action() -> (
    None
):
    """`answer_noise` keeps the prompts and redraws about that fraction of the answers uniformly
    over the admissible actions (so some redraws are the expert's own)."""
    specs = household.generate_specs("id", 60, seed=7)

    def demos(answer_noise: float) -> list[tuple[str, str]]:
        made = policy_demonstrations(
            specs,
            household.HouseholdEpisode,
            noise=0.3,
            history_steps=0,
            seed=3,
            explain=False,
            action_format="text",
            answer_noise=answer_noise,
        )
        return [(d.prompt[1]["content"], d.answer) for d in made]

    clean, noisy = demos(0.0), demos(0.5)
    assert [p for p, _ in noisy] == [p for p, _ in clean]
    changed = 0
    for (prompt, expert), (_, answer) in zip(clean, noisy, strict=True):
        listed = [line[2:] for line in prompt.splitlines() if line.startswith("- ")]
        assert answer.removeprefix("\\boxed{").removesuffix("}") in listed
        changed += answer != expert
    # Redrawn with probability 0.5, to another action with probability 1 - 1/k (k listed actions).
    expected = sum(
        0.5 * (1 - 1 / sum(line.startswith("- ") for line in p.splitlines())) for p, _ in clean
    )
    assert len(clean) > 300
    assert abs(changed - expected) < 4 * math.sqrt(expected), (changed, expected)
    assert demos(0.0) == clean  # no noise: the planner's answers, deterministically


def test_answer_noise_is_refused_where_no_answer_can_be_drawn() -> None:
    config = {
        "mode": "outcome_only",
        "environment": {"name": "household"},
        "reward_model": {"warm_start": {"enabled": True, "answer_noise": 0.2}},
    }
    with pytest.raises(ValueError, match=r"reward_model\.warm_start\.answer_noise"):
        parse_config(config)
    coding, _ = make_environment("coding", {}, "id")
    request = WarmStart("policy", 2, 0.0, 0.0, False, specs_seed=0, seed=0, answer_noise=0.2)
    with pytest.raises(ValueError, match="answer_noise"):
        coding.demonstrations(request)


@pytest.mark.parametrize("action_format", ["number", "text"])
def test_a_choosing_policy_plays_only_admissible_answers_as_it_would_write_them(
    action_format: ActionFormat,
) -> None:
    """`policy.answers: choose`: every step's answer is one of the episode's listed answers, so
    every move is valid; the row's tokens are that answer + EOS, with the sampler's log-probs of
    them; rerunning gives the same rows (seeded draws)."""
    from rlanything_core.models.engines import HFEngine

    env = make_environment("household", {"action_format": action_format}, "id")[0]
    specs = household.generate_specs("id", 2, seed=3)
    refs = [TaskRef(f"t{i}", 1, s) for i, s in enumerate(specs)]
    model, tok = load_model("tiny", device="cpu")
    engine = HFEngine(model, tok)

    def rows() -> list[dict[str, object]]:
        return play(
            engine,
            env,
            refs,
            rollouts_per_task=2,
            round_idx=0,
            base_seed=5,
            checkpoint="c",
            sampling=Sampling(1.0, 4, 8, choose=True),
        )

    first = rows()
    assert len(first) > 4 and all(r["action_valid"] for r in first)
    for r in first:
        ids = [*tok(r["response"], add_special_tokens=False)["input_ids"], tok.eos_token_id]
        assert r["response_token_ids"] == ids and len(r["sampler_logprobs"]) == len(ids)  # type: ignore[arg-type]
        if action_format == "text":
            assert r["response"] == f"\\boxed{{{r['action']}}}"
    assert [r["response"] for r in rows()] == [r["response"] for r in first]


def test_choosing_needs_an_engine_that_scores_and_episodes_that_list_answers() -> None:
    """Clear errors, not a crash deep inside: a served policy cannot choose and a per-token
    score needs choosing (config); an engine without `choose` and an episode without `answers`
    are named with the fix."""
    from pydantic import ValidationError

    from rlanything_core.run.config import PolicyConfig
    from rlanything_core.run.rollout import _answer

    with pytest.raises(ValidationError, match="answers: choose scores every admissible answer"):
        PolicyConfig.model_validate(
            {"answers": "choose", "model": {"engine": {"kind": "openai", "url": "http://h:1"}}}
        )
    with pytest.raises(ValidationError, match="answer_score: mean scores the answers a choosing"):
        PolicyConfig.model_validate({"answer_score": "mean"})
    spec = household.generate_specs("id", 1, seed=4)[0]
    episode = make_environment("household", {}, "id")[0].new_episode(spec, None, None)
    with pytest.raises(ValueError, match=r"_Expert does not\. Use policy\.model\.engine\.kind: hf"):
        _answer(_Expert(spec, "number"), [episode], [0], Sampling(1.0, 4, 1, choose=True))  # type: ignore[arg-type]

    class Bare:
        def messages(self) -> Messages:
            return episode.messages()

    model, tok = load_model("tiny", device="cpu")
    from rlanything_core.models.engines import HFEngine

    with pytest.raises(ValueError, match=r"Bare has none\. Use policy\.answers: generate"):
        _answer(HFEngine(model, tok), [Bare()], [0], Sampling(1.0, 4, 1, choose=True))  # type: ignore[list-item]


def test_forward_chunks_cut_a_micro_batch_by_its_padded_tokens() -> None:
    """warm_start.max_forward_tokens: runs in order, each at most max_tokens as rows × longest
    row, a pair longer than that alone; None keeps the micro-batch whole. By hand: lengths 3, 5,
    2, 9 under 10 tokens → [3, 5] (2 × 5), [2] ([2, 9] would be 2 × 9), [9]."""
    pairs = [([1] * n, [2]) for n in (2, 4, 1, 8)]  # prompt + response: 3, 5, 2, 9 tokens
    runs = forward_chunks(pairs, 10)
    assert [[len(p) + len(r) for p, r in run] for run in runs] == [[3, 5], [2], [9]]
    assert forward_chunks(pairs, None) == [pairs]
    assert forward_chunks(pairs, 1) == [[pair] for pair in pairs]


def test_a_micro_batch_run_in_chunks_takes_the_same_step() -> None:
    """Gradients of a micro-batch's passes add up to one pass's: after 3 SGD steps of 4 pairs of
    different lengths, run whole or one pair a pass (at most 1.5 × the longest pair's tokens),
    every weight and the loss agree to float32 rounding, and the chunks did run."""
    trained = []
    for chunked in (False, True):
        torch.manual_seed(0)
        model, tok = load_model("tiny", device="cpu", trainable=True)
        pairs = [
            (encode_chat(tok, _toy_prompt(goal)), with_eos([5 + k, 6], tok.eos_token_id))
            for k, goal in enumerate(["look", "take the mug", "open drawer 2 then look", "go"])
        ]
        lengths = [len(p) + len(r) for p, r in pairs]
        assert len(set(lengths)) > 1  # padding inside the whole batch, none in a chunk
        limit = int(1.5 * max(lengths)) if chunked else None
        # SGD: the step is the gradient itself (AdamW's first steps are ±lr whatever its size,
        # so gradients that are rounding noise would flip its sign)
        sgd = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        metrics = sft_update(model, sgd, pairs * 3,
                             pad_id=tok.pad_token_id, micro_batch_size=4, seed=0,
                             max_forward_tokens=limit)  # fmt: skip
        trained.append((metrics, {k: v.detach().clone() for k, v in model.state_dict().items()}))
        assert len(forward_chunks(pairs, limit)) == (4 if chunked else 1)
    (whole, a), (chunked, b) = trained
    assert chunked["sft_loss"] == pytest.approx(whole["sft_loss"], rel=1e-5)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-6, msg=name)
