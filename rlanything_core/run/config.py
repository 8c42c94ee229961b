"""Typed configuration of a training run: one pydantic model per component, unknown keys rejected.

Prefect renders the flow parameter `config: RunConfig` as a form; YAML files in `configs/` hold the
same structure. Each field says its unit or range, its default and where the default comes from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from rlanything_core.base.generation import AnswerScore
from rlanything_core.envs.interface import (
    Environment,
    TaskSpec,
    WritesUnitTests,
    environment_class,
    make_environment,
)
from rlanything_core.method.parsing import parse_verdict
from rlanything_core.models.config import ModelConfig, UpdateConfig, _Strict
from rlanything_core.run.rollout import DEFAULT_MAX_STEPS

Mode = Literal["outcome_only", "policy", "reward", "env"]


class WarmStartConfig(_Strict):
    """Supervised fine-tuning on expert-made data before round 0 (off by default).

    Small models (SmolLM2-135M, tiny test models) do not follow the answer format zero-shot;
    a short warm start gives RL a partly competent policy and an imperfect reward model to
    improve, as the paper's 7B models are from the start."""

    enabled: bool = False
    """Run the warm start (once per run, before round 0). Off by default: the paper's models
    need none."""
    episodes: int = Field(8, ge=1)
    """Expert episodes whose steps make the training pairs (≥ 1; for the environment model:
    task specs, each a rewrite example). The default is a smoke-test size; the shipped configs
    use tens to thousands."""
    episodes_per_task: int = Field(1, ge=1)
    """Episodes played on each generated task (≥ 1), the noise making them differ: more pairs
    from fewer tasks where tasks are slow to make (a TextWorld game takes about a second)."""
    noise: float = Field(0.3, ge=0.0, le=1.0)
    """Fraction of random actions in those episodes, in [0, 1]: the demonstrations then cover
    states off the expert's path, which the policy reaches as soon as it errs."""
    label_noise: float = Field(0.2, ge=0.0, le=1.0)
    """Reward model only: fraction of step labels flipped, in [0, 1], so that the RM starts
    imperfect and consistency feedback has something to improve."""
    answer_noise: float = Field(0.0, ge=0.0, le=1.0)
    """Policy only: fraction of the demonstrations answered with an admissible action drawn
    uniformly instead of the expert's, so the policy imitates a partly competent demonstrator
    (household and TextWorld; other environments refuse it). It costs a tiny policy much more
    than its share: the household learning benchmark's choosing policy started at 3.9 % held
    out after 1000 episodes x 2 epochs with 0.3 of the answers drawn, against 49.0 % with none
    (benchmarks/results/learning/README.md); fewer episodes lower the start less abruptly. In
    [0, 1]; 0 = the expert's answers only."""
    explain: bool = True
    """Policy only: answers name the action before the box ("I will go to desk 1. \\boxed{6}"),
    as a chat model answers; False trains the box alone (shorter answers, for tiny models that
    gain nothing from the sentence)."""
    epochs: int = Field(1, ge=1)
    """Passes over the pairs (≥ 1)."""
    lr: float = Field(5e-4, gt=0.0)
    """AdamW learning rate of the warm start (> 0). Supervised fine-tuning of a small model
    takes far larger steps than RL's 1e-6; the shipped configs use 1e-3."""
    lr_schedule: Literal["constant", "linear"] = "constant"
    """"linear" decays the learning rate linearly to 0 over the warm start's steps, which ends
    at a lower loss than a constant rate for the same steps; "constant" (default) keeps `lr`:
    on the household learning benchmark three decayed warm starts started higher and RL then
    gained nothing from them (benchmarks/results/learning/README.md)."""
    micro_batch_size: int = Field(8, ge=1)
    """Pairs per optimizer step (≥ 1)."""
    group_by_length: bool = False
    """Make each micro-batch of pairs of about the same length (shuffled within groups of 64
    micro-batches, the batches in random order), so less of each batch is padding: 1.32x as
    fast a step for the tiny household policy (benchmarks/results/sft-speed.json). Off by
    default: with it (and bfloat16) a constant-rate warm start ended far weaker
    (benchmarks/results/learning/README.md)."""
    cache: bool = True
    """Keep the finished warm start in the user's cache directory (`$RLANYTHING_CACHE`, else
    ~/.cache/rlanything, under warm-starts/) and reuse it in a later run whose warm start would
    be the same: the same role, base model, device and dtype, LoRA rank, warm-start settings,
    seed and demonstrations (a hash of them all names the entry). False trains it in every run
    (the fault-injection tests do, to kill runs inside it)."""
    max_forward_tokens: int | None = Field(None, ge=1)
    """At most this many tokens (rows × longest row, padding included) in one forward pass: a
    micro-batch longer than that runs as several passes whose gradients add up before its one
    optimizer step, the same step up to rounding with less memory held at once (long prompts:
    an environment model's task specs). None: one pass per micro-batch. At 1024 the demo's
    three warm starts peaked at 3.8 GB instead of 6.7 (benchmarks/results/demo-memory/README.md)."""


# Options of the built-in environments as they were spelled before `environment.options` (at
# the top of `environment`), with their defaults then: old configs and run directories load.
_FLAT_OPTIONS: dict[str, object] = {
    "step_slack": 6,
    "history_steps": 2,
    "action_format": "number",
    "goals": None,
    "num_rooms": None,
    "num_distractors": None,
    "source": "builtin",
    "sandbox": {"isolation": "auto", "memory_mb": 1024},
    "browser": {
        "executable": "/usr/bin/chromium",
        "viewport": [900, 700],
        "action_timeout_ms": 3000,
        "screenshots": True,
    },
}


class EnvironmentConfig(_Strict):
    """The environment and its initial task pool (docs/own-environment.md)."""

    name: str = "household"
    """The environment: a built-in one (household: the built-in ALFWorld-style household;
    coding: programs run on tests; gui: web apps in headless Chromium; textworld: games generated
    by Microsoft's TextWorld; alfworld: ALFWorld's games, from the data the user downloaded into
    $ALFWORLD_DATA), an entry point of the group `rlanything.environments`, or your own class
    as "package.module:ClassName"."""
    options: dict[str, Any] = Field(default_factory=dict)
    """The environment's own settings, validated by its `Options` model (unknown keys are
    errors); every default is filled in. Built-ins: step_slack, history_steps, action_format
    (text environments), goals, num_rooms, num_distractors (household), source, sandbox
    (coding), browser (gui): see "Options" in docs/environments/<name>.md."""
    num_tasks: int = Field(16, ge=1)
    """Tasks in the initial pool (≥ 1). Paper (AlfWorld): 16 tasks per step; coding: 64."""
    tasks_per_round: int | None = Field(None, ge=1)
    """Tasks each round plays (its batch), drawn from the pool without replacement: every task
    once per pass over the pool, in a new seeded order each pass. None = the whole pool every
    round. At most `num_tasks`. A pool larger than the batch keeps the policy from learning its
    training tasks by heart (benchmarks/results/learning/README.md)."""
    split: Literal["id", "ood"] = "id"
    """Generator of the initial pool: in-domain ("id", the default: the paper trains in-domain
    and reports out-of-domain accuracy on held-out tasks) or out-of-domain ("ood") tasks."""
    seed: int = 0
    """Seed of the task generator (any integer); `evaluation.seed` draws the held-out sets."""
    max_episode_steps: int = Field(DEFAULT_MAX_STEPS, ge=1)
    """Steps after which the loop ends an episode that has not ended itself (≥ 1): it counts as
    failed (`policy/cut_episodes`, `eval/<split>/cut_episodes`). A task whose spec has a
    `max_steps` field ends there if that is sooner. Default 200, above every built-in's step
    limit (at most 100): only an environment whose episodes never end reaches it."""
    tasks_file: str | None = None
    """A tasks Parquet file (the `tasks` schema, e.g. written by `rlanything humaneval`): the
    initial pool is its first `num_tasks` rows instead of generated tasks."""

    @model_validator(mode="before")
    @classmethod
    def _flat_options(cls, data: Any) -> Any:
        """Options spelled at the top of `environment` (configs before `options`) move into
        `options`; an old default of an option the environment lacks is dropped."""
        if not isinstance(data, dict) or not any(k in data for k in _FLAT_OPTIONS):
            return data
        data = dict(data)
        name = data.get("name", "household")
        fields = environment_class(name).Options.model_fields
        options = dict(data.get("options") or {})
        for key, old_default in _FLAT_OPTIONS.items():
            if key not in data:
                continue
            value = data.pop(key)
            if key in fields:
                options.setdefault(key, value)
            elif _as_json(value) != old_default:
                raise ValueError(
                    f"environment.{key} is not an option of environment {name!r} (its options: "
                    f"{', '.join(fields) or 'none'}); remove it."
                )
        data["options"] = options
        return data

    @model_validator(mode="after")
    def _ranges_draw_tasks(self) -> EnvironmentConfig:
        if self.tasks_per_round is not None and self.tasks_per_round > self.num_tasks:
            raise ValueError(
                f"environment.tasks_per_round ({self.tasks_per_round}) exceeds the pool's "
                f"num_tasks ({self.num_tasks}); raise num_tasks or lower tasks_per_round."
            )
        if ".py:" in self.name and not Path(self.name.rpartition(":")[0]).is_absolute():
            # stored absolute, so that resume and eval work from any directory
            file, _, cls = self.name.rpartition(":")
            self.name = f"{Path(file).resolve()}:{cls}"
        env, self.options = make_environment(self.name, self.options, self.split)
        try:
            env.check_pool(self.num_tasks, self.seed)
        except Exception as exc:
            raise ValueError(_pool_error(env, self.options, exc)) from exc
        return self

    @property
    def env(self) -> Environment:
        """A new instance of the environment this config names, with its validated options."""
        return make_environment(self.name, self.options, self.split)[0]

    def generate(self, split: Literal["id", "ood"], n: int, seed: int) -> list[TaskSpec]:
        """`n` task specs of `split` from the environment's generator."""
        return list(self.env.generate(split, n, seed))


def _pool_error(env: Environment, options: dict[str, Any], exc: Exception) -> str:
    """One line for an initial pool the environment cannot generate, naming the options that
    differ from their defaults (the likely cause)."""
    reason = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
    reason = reason.rstrip(". ")
    try:
        defaults = type(env).Options().model_dump(mode="json")
    except ValidationError:  # an option without a default
        defaults = {}
    changed = [f"{k}: {v!r}" for k, v in options.items() if defaults.get(k, object()) != v]
    if changed:
        return (
            f"environment {env.name!r} generates no valid task with environment.options "
            f"{{{', '.join(changed)}}}: {reason}. Change those options."
        )
    return (
        f"environment {env.name!r} generates no valid task with its default options: {reason}. "
        "Fix the environment's generate (rlanything check-env CONFIG runs its checks)."
    )


def _as_json(value: object) -> object:
    """`value` as YAML/JSON spells it (tuples as lists), to compare with an old default."""
    if isinstance(value, tuple | list):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


class PolicyConfig(_Strict):
    """The policy π: the model that plays the environment's tasks, trained by RL on integrated
    feedback (or on outcomes alone in outcome_only mode)."""

    model: ModelConfig = ModelConfig()
    """The policy's model and how it samples."""
    update: UpdateConfig = UpdateConfig()
    """The policy's RL update each round."""
    warm_start: WarmStartConfig = WarmStartConfig()
    """Supervised fine-tuning on expert steps before round 0."""
    answers: Literal["generate", "choose"] = "generate"
    """"generate": the policy writes its answer (the paper). "choose": at each step the policy
    picks one of the admissible answers its environment lists (text environments: every
    admissible action in \\boxed{}), drawn with its own probability of writing each, renormalized
    over the list (temperature-scaled; GLAM and TWOSOME act so). No answer is then inadmissible,
    and the update trains the chosen answer's tokens as if sampled: PPO's ratio is that of the
    answer's probability, not of the renormalized one (benchmarks/results/learning/README.md
    says what choosing changes). In-process engine only."""
    answer_score: AnswerScore = "sum"
    """With answers: choose, the score ℓ_k whose softmax draws answer k: "sum", the log-prob of
    writing the whole answer (its tokens' log-probs summed), or "mean", per token (the sum over
    its number of tokens; TWOSOME's token normalization). The sum favours answers of few tokens
    wherever the policy is unsure."""
    accuracy_band: tuple[float, float] = (1 / 8, 7 / 8)
    """Train only on tasks whose round accuracy is in [low, high], 0 ≤ low ≤ high ≤ 1. Paper:
    [1/8, 7/8]: a task all of whose rollouts failed, or all succeeded, teaches nothing."""
    drop_zero_advantage: bool = True
    """Drop samples whose advantage is exactly 0: they carry no gradient and only cost time."""
    rollout_workers: int = Field(1, ge=1)
    """Processes that play a round's tasks in parallel, each with its own copy of the policy: a
    Dask cluster through prefect-dask. In-process ("hf") engine only: a served engine batches
    the requests of one process by itself (`engine.concurrency`). ≥ 1; 1 = in the flow's own
    process."""
    rollout_cluster: str | None = None
    """Address of a running Dask scheduler (e.g. "tcp://10.0.0.5:8786") that gets the
    `rollout_workers` shards, instead of a local cluster: rollouts over several machines."""

    @model_validator(mode="after")
    def _parallel_rollouts_need_hf(self) -> PolicyConfig:
        if (self.rollout_workers > 1 or self.rollout_cluster) and self.model.engine.kind != "hf":
            raise ValueError(
                f"policy.rollout_workers > 1 (or rollout_cluster) plays with in-process models, "
                f"but policy.model.engine.kind is {self.model.engine.kind!r}; set "
                "rollout_workers: 1 and raise policy.model.engine.concurrency instead"
            )
        return self

    @model_validator(mode="after")
    def _choosing_needs_hf(self) -> PolicyConfig:
        if self.answers == "choose" and self.model.engine.kind != "hf":
            raise ValueError(
                f"policy.answers: choose scores every admissible answer with the in-process model, "
                f"but policy.model.engine.kind is {self.model.engine.kind!r}; set engine.kind: hf "
                "or answers: generate"
            )
        return self

    @model_validator(mode="after")
    def _answer_score_needs_choosing(self) -> PolicyConfig:
        if self.answer_score != "sum" and self.answers != "choose":
            raise ValueError(
                f"policy.answer_score: {self.answer_score} scores the answers a choosing policy "
                "picks among, but policy.answers is 'generate'; set answers: choose or remove "
                "answer_score"
            )
        return self


class RewardModelConfig(_Strict):
    """The reward model: a generative judge that writes reasoning and a verdict S ∈ {+1, −1} for
    each step, m times per step (or, for coding, unit tests), trained by consistency feedback
    R_S = R·S in the reward and env modes."""

    model: ModelConfig = ModelConfig()
    """The reward model's model and how it samples."""
    update: UpdateConfig = UpdateConfig()
    """The reward model's RL update each round (reward and env modes)."""
    warm_start: WarmStartConfig = WarmStartConfig()
    """Supervised fine-tuning on labelled steps before round 0."""
    mode: Literal["judge", "unit_tests"] = "judge"
    """"judge": m verdicts per step (paper). "unit_tests" (coding only): the RM writes
    `tests_per_task` tests per task and a program's results on them are its votes (reference
    code's coding mode)."""
    votes: int = Field(3, ge=1)
    """m, verdicts sampled per step in judge mode (≥ 1). Paper: 3: their mean is the step
    signal, and consistency feedback is standardized over them."""
    answers: Literal["generate", "choose"] = "generate"
    """Judge mode. "generate": each vote is an answer the RM writes, reasoning then a verdict in
    \\boxed{} (the paper). "choose": each vote is one of `verdicts`, drawn with the RM's own
    probability of writing it, renormalized over them (temperature-scaled), as
    `policy.answers: choose` draws actions: one forward pass per step for all m votes instead of
    m decodes. The same distribution as "generate" for an RM that only ever writes one of
    `verdicts` (as the built-in warm starts teach); an RM that reasons freely is cut to them.
    In-process engine only."""
    verdicts: tuple[str, ...] = ("Progress. \\boxed{1}", "No progress. \\boxed{-1}")
    """With answers: choose, the complete answers a vote is drawn among; each must hold a
    parsable verdict. The default is what the built-in warm starts teach."""
    tests_per_task: int = Field(8, ge=1)
    """Unit-test mode: tests the RM writes per task per round (≥ 1). Reference (coding): 16;
    8 halves the sandbox runs."""
    parse_failure_penalty: float = -2.0
    """Reward of a verdict that cannot be parsed, before standardization (any real number).
    Reference code: −2, the lowest reward a parsed vote can get (R·S ≥ −2 at λ = 1)."""
    accuracy_band: tuple[float, float] = (0.2, 0.8)
    """Train the RM only on tasks whose round accuracy is in [low, high], 0 ≤ low ≤ high ≤ 1.
    Paper: [0.2, 0.8]: where nearly every episode fails (or wins), consistency feedback rewards
    one verdict on every step and teaches a bias rather than a judge."""
    balance_verdicts: bool = False
    """Judge mode: weigh the update's kept votes so that each verdict's votes carry the same
    total weight (`signals.verdict_weights`). False (the paper): consistency feedback
    reinforces the verdict that agrees with the outcome, and where most episodes fail that is
    mostly "no progress", so a judge can learn the class prior rather than the steps (TextWorld
    ablation: process accuracy 73.9 → 77.2 % while balanced fell 76.7 → 67.6 %,
    benchmarks/results/ablation-textworld/balance-probe/README.md)."""
    balance_directions: bool = False
    """Judge mode: weigh the update's votes so that its pushes toward "progress" and toward
    "no progress" carry the same total |advantage| (`signals.direction_weights`): the update then
    fits both classes equally, as balanced process accuracy scores them. False (the paper): it
    fits the share of steps R_τ calls progress, a minority where most episodes fail, and the
    judge drifts to "no progress" (TextWorld, 3 seeds × 8 rounds: +3.2 to +3.9 points balanced
    on the same held-out steps with it, −4.6 without;
    benchmarks/results/ablation-design/tw-rm-direction/README.md). Not with balance_verdicts."""

    @property
    def balance(self) -> Literal["verdict", "direction"] | None:
        """How the RM update weighs its votes (`signals.rm_samples`): by verdict, by direction,
        or not at all."""
        if self.balance_verdicts:
            return "verdict"
        return "direction" if self.balance_directions else None

    @model_validator(mode="after")
    def _choosing_verdicts(self) -> RewardModelConfig:
        for name in ("balance_verdicts", "balance_directions"):
            if getattr(self, name) and self.mode != "judge":
                raise ValueError(
                    f"reward_model.{name} weighs judge verdicts, but reward_model.mode is "
                    f"{self.mode!r}; remove {name}"
                )
        if self.balance_verdicts and self.balance_directions:
            raise ValueError(
                "reward_model.balance_verdicts and balance_directions are two ways to weigh the "
                "same votes; set one of them"
            )
        if self.answers != "choose":
            return self
        if self.model.engine.kind != "hf":
            raise ValueError(
                f"reward_model.answers: choose scores every verdict with the in-process model, "
                f"but reward_model.model.engine.kind is {self.model.engine.kind!r}; set "
                "engine.kind: hf or answers: generate"
            )
        if self.mode != "judge":
            raise ValueError(
                "reward_model.answers: choose draws judge verdicts, but reward_model.mode is "
                f"{self.mode!r}; set answers: generate"
            )
        unparsable = [v for v in self.verdicts if parse_verdict(v) is None]
        if len(set(self.verdicts)) < 2 or unparsable:
            raise ValueError(
                f"reward_model.verdicts must list at least two distinct answers, each with a "
                f"verdict in \\boxed{{}} such as 'Progress. \\boxed{{1}}'; got "
                f"{list(self.verdicts)} (unparsable: {unparsable})"
            )
        return self


class EnvModelConfig(_Strict):
    """The environment model: it summarizes a critique of each task out of the accuracy band and
    rewrites the task harder or easier (env mode). RL never trains it, as in the paper."""

    model: ModelConfig = ModelConfig(max_new_tokens=96)
    """The environment model's model and how it samples; 96 new tokens by default, as a rewrite
    is a JSON spec or the fields that change."""
    warm_start: WarmStartConfig = WarmStartConfig()
    """Fine-tune on rewrite examples (`episodes` = task specs) before round 0; RL never trains
    the environment model."""
    lora_rank: int = Field(16, ge=0)
    """LoRA rank of the warm start (≥ 0; 0 = full fine-tuning, as the shipped configs' tiny
    models use)."""
    critique_source: Literal["reward_model", "failed_rollouts"] = "reward_model"
    """"reward_model": summarize the RM's reasoning on the task's steps (paper). "failed_rollouts":
    summarize failed rollouts, marking steps all m votes rejected as high-risk (reference code)."""
    critique_examples: int = Field(6, ge=1)
    """Reasonings or failed steps quoted to the summarizer (≥ 1): enough to show a pattern,
    few enough to fit a small model's context."""
    critique_max_new_tokens: int = Field(64, ge=1)
    """Length limit of the critique summary, in tokens (≥ 1)."""
    constrain_keys: bool = False
    """Decode the rewrite's top-level JSON keys among the task spec's fields only
    (`Environment.rewrite_keys`; vLLM: a JSON-schema `response_format`). The values, and whether
    the rewrite is valid, stay the model's and the environment's business. Not in the paper;
    off by default. A tiny TextWorld environment model wrote 92.8 % valid rewrites with it
    (benchmarks/results/rewrite-validity/README.md)."""


class AdvantageConfig(_Strict):
    """How rewards become advantages: the policy's integrated feedback
    R_{τ_i} = O_τ + λ·(1/m) Σ_j S_{τ_i,j}, standardized per group as A = (R − mean) / (std + ε)
    (population std; a group whose std is ≤ 1e-8 gets 0)."""

    lam: float = 1.0
    """λ in R = O + λ·mean(S), the weight of the reward model's step signal (any real number;
    0 = outcomes alone). Paper and reference code: 1."""
    estimator: Literal["step", "task"] = "step"
    """"step": standardize per (task, step index) (paper); "task": over all steps of all
    rollouts of a task, since the per-index baseline depends on when each rollout stopped
    (verl RFC #7244): late steps exist only in long, mostly failed episodes."""
    grouping: Literal["step_index", "state"] = "step_index"
    """With estimator "step", a step's group: the task's steps of the same index (paper) or
    taken from the same state, anchor-state grouping as in GiGPO (arXiv 2505.10978). A step's
    state is what the policy saw, its prompt (goal, observation, admissible actions; with
    environment.options.history_steps > 0 its history too, so only equal histories share a
    group)."""
    outcome_weight: float = Field(1.0, ge=0.0)
    """w in the policy's R = w·O + λ·mean(S). Paper: 1. 0 is the "Step-only" row (the reward
    model's step signal alone); the reward model's consistency feedback keeps w = 1."""
    singleton: Literal["raw", "zero"] = "raw"
    """A step-index group with one member (only one rollout reached that step) keeps its raw R
    ("raw", the reference code) or gets 0 ("zero"): it has no baseline to compare with."""
    eps: float = Field(1e-6, gt=0.0)
    """ε added to the population std (> 0) so that a near-constant group does not divide by
    almost 0."""
    invalid_action_penalty: float = Field(0.0, ge=0.0)
    """Subtracted from R of every step whose answer named no admissible action, before the
    advantages are standardized: R = O + λ·mean(S) − c·[invalid]. 0 = the paper's R. Not in the
    paper; verl-agent's ALFWorld scripts use 0.1. Outcome-only rewards give an invalid step of a
    won episode the same credit as its valid steps, so on their own they do not teach the answer
    format (benchmarks/results/learning/README.md)."""


class AdaptationConfig(_Strict):
    """Environment adaptation (env mode): which tasks the environment model rewrites, and which
    rewrites replace their task. A harder q' is accepted if α_low < acc(q') < acc(q), an easier
    one if acc(q) < acc(q') < α_high."""

    alpha_low: float = Field(0.2, ge=0.0, le=1.0)
    """Tasks with accuracy ≤ alpha_low are made easier; in [0, 1], below alpha_high. Paper: 0.2."""
    alpha_high: float = Field(0.8, ge=0.0, le=1.0)
    """Tasks with accuracy ≥ alpha_high are made harder; in [0, 1]. Paper: 0.8."""
    bounds: Literal["strict", "inclusive"] = "strict"
    """Acceptance bounds: "strict" (paper: α_low < acc(q') < α_high) or "inclusive" (reference
    code: ≤). The comparison with acc(q) is strict in both."""
    compare: Literal["same_checkpoint", "round_accuracy"] = "same_checkpoint"
    """"same_checkpoint": roll out q and q' on the updated policy (default), so that the
    comparison measures the rewrite, not the update; "round_accuracy": compare acc(q') under
    the updated policy with acc(q) from this round (reference code)."""
    max_rewrites: int | None = Field(None, ge=1)
    """Rewrite at most this many tasks per round (≥ 1, lowest task ids first); each rewrite costs
    G rollouts in the acceptance check. None = all triggered."""
    replay_accepted: bool = True
    """With environment.tasks_per_round (each round plays a batch of the pool), play the rewrites
    accepted in a round in the next one, ahead of that round's own batch, which keeps its size.
    False: an accepted rewrite waits until a pass over the pool reaches its place (with 64 of
    1024 tasks a round, 16 rounds later), so adaptation changes nothing a short run plays. A run
    that plays the whole pool every round plays every rewrite next round either way."""


class EvalConfig(_Strict):
    """Held-out evaluation (`rlanything eval`): fixed task sets, fixed seeds."""

    num_tasks: int = Field(16, ge=1)
    """Tasks per split, in-domain and out-of-domain (≥ 1). Intervals are clustered by task, so
    tasks narrow them more than episodes: 400 tasks × 2 episodes gave about ±3–4 points at
    18–50 % (benchmarks/results/learning/README.md)."""
    rollouts_per_task: int = Field(4, ge=1)
    """Episodes per task (≥ 1); pass@k is reported for k up to this."""
    seed: int = 1000
    """Seed of the held-out task generators; keep it away from environment.seed, so that the
    held-out tasks are not the training tasks."""
    every: int | None = Field(None, ge=1)
    """Learning curve: during training, evaluate the starting models, the checkpoints after every
    `every` rounds and after the last round (RUN_DIR/eval/step_NNN/), ≥ 1; None = no
    evaluation."""
    curve_splits: tuple[Literal["id", "ood"], ...] = Field(("id", "ood"), min_length=1)
    """The held-out splits the learning curve evaluates, at least one (`rlanything eval` always
    does both); one split halves the curve's cost."""
    ood_options: dict[str, Any] | None = None
    """Options that draw the out-of-domain held-out set: `environment.options` updated with
    these, applied to the ood split as `environment.options` apply to the pool's (household:
    goals, num_rooms, num_distractors, targets replace the ood split's own). Only how its tasks
    are drawn; its episodes are played with `environment.options`. None = the environment's own
    ood split."""


class TrackingConfig(_Strict):
    """What the run records in MLflow: metrics, datasets and checkpoints."""

    experiment: str = "rlanything"
    """MLflow experiment name; created on first use."""
    checkpoints: Literal["artifact", "reference"] = "artifact"
    """"artifact": log checkpoints as MLflow artifacts (copies; fine for LoRA adapters and small
    models); "reference": log only their paths in the run directory (large models, and runs
    that write many checkpoints, such as the ablation)."""
    artifact_location: str | None = None
    """Where a new MLflow experiment keeps its artifacts (checkpoints, plots, eval.json): a
    directory or URI. None: with a local store (SQLite, the default) the user's data directory,
    $RLANYTHING_DATA/mlartifacts/<experiment> (default ~/.local/share/rlanything, or
    $XDG_DATA_HOME/rlanything), never the working directory; with a tracking server, the
    server's default artifact root. An experiment that exists keeps its location."""


class RLoopConfig(_Strict):
    """RLoop (Zeng et al., arXiv 2511.04285; `rlanything rloop`): cycles of exploration
    (ordinary rounds from the cycle's start policy) and exploitation (rejection-sampling
    fine-tuning of that start policy on successful trajectories of hard tasks). The refined
    policy starts the next cycle."""

    cycles: int = Field(2, ge=1)
    """Cycles to run (≥ 1). Paper: performance grows with more cycles."""
    rounds_per_cycle: int = Field(2, ge=1)
    """Exploration rounds per cycle (≥ 1; ordinary rounds of `mode`), replacing `rounds`."""
    harvest_rounds: list[int] | None = None
    """Rounds of each cycle whose rollouts are harvested, 0-based; round r's rollouts come from
    the checkpoint after round r − 1. None = every round: the paper collects trajectories from
    several intermediate checkpoints, since policy drift gives diversity."""
    hard_threshold: float = Field(0.5, gt=0.0, le=1.0)
    """A task is hard when its success rate over the harvested rollouts is below this, in
    (0, 1] (paper: focus on tasks with low success rate; active learning). 1.0 keeps every task
    not solved by all of its episodes."""
    sft_epochs: int = Field(2, ge=1)
    """Epochs of the fine-tuning on the expert set (≥ 1)."""
    sft_lr: float = Field(1e-5, gt=0.0)
    """AdamW learning rate of the fine-tuning on the expert set (> 0)."""
    sft_micro_batch_size: int = Field(8, ge=1)
    """Pairs per optimizer step of the fine-tuning (≥ 1)."""
    evaluate: bool = True
    """Evaluate each cycle's refined policy on the held-out sets (`evaluation`): accuracy and
    pass@k, RLoop's headline metric."""

    @model_validator(mode="after")
    def _harvest_in_cycle(self) -> RLoopConfig:
        bad = [r for r in self.harvest_rounds or [] if not 0 <= r < self.rounds_per_cycle]
        if bad or self.harvest_rounds == []:
            raise ValueError(
                f"rloop.harvest_rounds must be rounds 0..{self.rounds_per_cycle - 1} of a cycle "
                f"(at least one), or null for all; got {self.harvest_rounds}."
            )
        return self


class RunConfig(_Strict):
    """A training run: N rounds of rollout → scoring → advantages → updates → adaptation."""

    mode: Mode = "env"
    """Ablation row (paper Table 1): "outcome_only" = plain GRPO on outcomes; "policy" =
    integrated feedback from a fixed RM, fixed tasks; "reward" = + the RM is trained; "env" =
    + the tasks adapt (full RLAnything)."""
    rounds: int = Field(2, ge=1)
    """Rounds (RL steps) to run (≥ 1). The paper's runs take 200–400 steps on 32–96 GPUs; the
    default is a smoke test."""
    seed: int = 0
    """Base seed (any integer); every sample's seed is derived from it with hashlib, so that a
    sample does not depend on which others share its batch."""
    rollouts_per_task: int = Field(8, ge=1)
    """G, rollouts per task per round (≥ 2: advantages are standardized over them). Paper: 8."""
    environment: EnvironmentConfig = EnvironmentConfig()
    """The environment and its initial task pool."""
    policy: PolicyConfig = PolicyConfig()
    """The policy: its model, update and warm start."""
    reward_model: RewardModelConfig = RewardModelConfig()
    """The reward model (judge): its model, update, warm start and votes."""
    env_model: EnvModelConfig = EnvModelConfig()
    """The environment model that rewrites tasks (env mode)."""
    advantage: AdvantageConfig = AdvantageConfig()
    """How rewards become advantages."""
    adaptation: AdaptationConfig = AdaptationConfig()
    """Which tasks are rewritten and which rewrites are accepted (env mode)."""
    evaluation: EvalConfig = EvalConfig()
    """Held-out evaluation: `rlanything eval` and the learning curve."""
    tracking: TrackingConfig = TrackingConfig()
    """MLflow tracking."""
    rloop: RLoopConfig = RLoopConfig()
    """RLoop's cycles; used by `rlanything rloop` only."""

    @model_validator(mode="after")
    def _cross_checks(self) -> RunConfig:
        if self.rollouts_per_task < 2:
            raise ValueError(
                "rollouts_per_task must be at least 2: advantages are standardized over the G "
                f"rollouts of a task. You provided {self.rollouts_per_task}."
            )
        if self.adaptation.alpha_low >= self.adaptation.alpha_high:
            raise ValueError(
                "adaptation.alpha_low must be below adaptation.alpha_high; got "
                f"{self.adaptation.alpha_low} ≥ {self.adaptation.alpha_high}."
            )
        env = self.environment.env
        if self.evaluation.ood_options is not None:
            try:
                self.held_out_environment("ood")
            except ValueError as exc:
                raise ValueError(
                    f"evaluation.ood_options: {exc}".replace("environment.options.", "")
                ) from exc
        if self.reward_model.update.old_logprobs == "sampler":
            raise ValueError(
                "reward_model.update.old_logprobs: 'sampler' needs the sampler's log-probs, and "
                "only the policy's rollouts record them (not the reward model's votes or tests): "
                "set it to 'recompute'."
            )
        if self.reward_model.mode == "unit_tests" and not isinstance(env, WritesUnitTests):
            raise ValueError(
                f"reward_model.mode 'unit_tests' needs an environment whose reward model writes "
                f"unit tests (coding); {self.environment.name!r} has none: set "
                "reward_model.mode: judge."
            )
        for role, ws in (
            ("policy", self.policy.warm_start),
            ("reward_model", self.reward_model.warm_start),
            ("env_model", self.env_model.warm_start),
        ):
            if ws.enabled and role not in env.warm_starts:
                raise ValueError(
                    f"{role}.warm_start: environment {self.environment.name!r} has no {role} "
                    f"demonstrations (it has: {', '.join(sorted(env.warm_starts)) or 'none'}); "
                    f"set {role}.warm_start.enabled: false."
                )
            if ws.answer_noise and role != "policy":
                raise ValueError(
                    f"{role}.warm_start.answer_noise: only the policy's demonstrations have "
                    "answers to draw at random; remove it (the reward model's label noise is "
                    "`label_noise`)."
                )
        adv = self.advantage
        if adv.grouping == "state" and adv.estimator != "step":
            raise ValueError(
                "advantage.grouping: state groups the steps of a task by state and needs "
                f"advantage.estimator: step; got estimator: {adv.estimator}."
            )
        if adv.outcome_weight != 1.0 and not self.uses_reward_model:
            raise ValueError(
                "advantage.outcome_weight weighs the outcome against the reward model's verdicts, "
                "which outcome_only mode does not use: set mode to policy, reward or env, or "
                f"outcome_weight: 1 (got {adv.outcome_weight})."
            )
        for name, (low, high) in (
            ("policy.accuracy_band", self.policy.accuracy_band),
            ("reward_model.accuracy_band", self.reward_model.accuracy_band),
        ):
            if not 0.0 <= low <= high <= 1.0:
                raise ValueError(f"{name} must satisfy 0 ≤ low ≤ high ≤ 1; got [{low}, {high}].")
        return self

    def held_out_environment(self, split: Literal["id", "ood"]) -> Environment:
        """The environment that draws `split`'s held-out set: the configured one, or for "ood"
        with `evaluation.ood_options`, one whose options those update and whose own split is
        "ood" (so that they narrow it)."""
        options = self.evaluation.ood_options
        if split != "ood" or options is None:
            return self.environment.env
        env = self.environment
        return make_environment(env.name, env.options | options, "ood")[0]

    @property
    def uses_reward_model(self) -> bool:
        return self.mode != "outcome_only"

    @property
    def writes_unit_tests(self) -> bool:
        return self.uses_reward_model and self.reward_model.mode == "unit_tests"

    @property
    def rm_votes(self) -> int:
        """Votes per step: m in judge mode, the generated tests in unit-test mode."""
        rm = self.reward_model
        return rm.tests_per_task if rm.mode == "unit_tests" else rm.votes

    @property
    def trains_reward_model(self) -> bool:
        return self.mode in ("reward", "env")

    @property
    def adapts_tasks(self) -> bool:
        return self.mode == "env"


class ConfigError(ValueError):
    """A configuration file is invalid; the message names the file, the field and the problem."""


def load_config(path: str | Path) -> RunConfig:
    """Read a YAML config file into a RunConfig, with errors that name the field to change."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(
            f"{p} is a directory, not a config file; give the path of a YAML file, such as "
            "configs/tiny.yaml."
        )
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; see configs/ for examples.")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{p} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8."
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p} is not valid YAML: {exc}") from exc
    if data is None:
        raise ConfigError(
            f"{p} is empty (or only comments); write {{}} in it to train with every default, "
            "or start from a file in configs/."
        )
    nodes = _expanded_nodes(data, MAX_CONFIG_NODES)
    if nodes > MAX_CONFIG_NODES:
        raise ConfigError(
            f"{p} expands to more than {MAX_CONFIG_NODES} values once its YAML aliases (*name) "
            "are resolved; a config holds a few hundred. Write the repeated parts out, or "
            "remove the aliases."
        )
    return parse_config(data, where=str(p))


MAX_CONFIG_NODES = 100_000
"""Values a config may expand to: YAML aliases can nest a list of ten ten-fold into 10^k
values (a "billion laughs"), which validation would walk one by one."""


def _expanded_nodes(data: object, limit: int) -> int:
    """Values in `data` with every alias expanded, counted up to just past `limit`."""
    seen: dict[int, int] = {}  # id of a container already counted → its expanded size

    def count(value: object) -> int:
        if not isinstance(value, dict | list):
            return 1
        if id(value) in seen:
            return seen[id(value)]
        seen[id(value)] = limit + 1  # a value that holds itself (`&a [*a]`) never ends
        total = 1
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            total += count(key) + count(item) if isinstance(value, dict) else count(item)
            if total > limit:
                break
        seen[id(value)] = total
        return total

    return count(data)


def parse_config(data: object, where: str = "config") -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = "\n".join(
            f"  - {'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors()
        )
        raise ConfigError(f"{where} is not a valid rlanything config:\n{problems}") from exc


def dump_config(config: RunConfig) -> str:
    """The config as YAML, every field spelled out (written to RUN_DIR/config.yaml)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
