"""Stage 3: integrated feedback and advantages for the policy, consistency feedback for the RM."""

from __future__ import annotations

import pandas as pd

from rlanything_core.method.signals import policy_samples, rm_samples, test_samples, verdict_matrix
from rlanything_core.run.config import RunConfig
from rlanything_core.run.rundir import Inputs, RunDir
from rlanything_tasks.common import stage_task
from rlanything_tasks.playing import Metrics, Outputs


@stage_task("advantage-computation")
def advantage_computation(
    config: RunConfig, run: RunDir, r: int, inputs: Inputs
) -> tuple[Outputs, Metrics]:
    """Integrated feedback and advantages for the policy; consistency feedback for the RM."""
    rollouts = inputs.read("rollouts")
    judgments = inputs.read("judgments") if config.uses_reward_model else None
    # The (N, m) verdicts, pivoted once for the policy's and the RM's signals and metrics.
    verdicts = None if judgments is None else verdict_matrix(rollouts, judgments, config.rm_votes)
    adv = config.advantage
    policy, metrics = policy_samples(
        rollouts,
        verdicts,
        lam=adv.lam,
        estimator=adv.estimator,
        singleton=adv.singleton,
        eps=adv.eps,
        band=config.policy.accuracy_band,
        drop_zero_advantage=config.policy.drop_zero_advantage,
        invalid_action_penalty=adv.invalid_action_penalty,
        grouping=adv.grouping,
        outcome_weight=adv.outcome_weight,
    )
    outputs = {"policy_samples": run.write(policy, r, "policy_samples")}
    rm_rows: pd.DataFrame | list[dict[str, object]] = []
    test_rows: pd.DataFrame | list[dict[str, object]] = []
    if judgments is not None and config.writes_unit_tests:
        test_rows, rm_metrics = test_samples(
            rollouts,
            inputs.read("unit_tests"),
            judgments,
            invalid_penalty=config.reward_model.parse_failure_penalty,
            eps=adv.eps,
            band=config.reward_model.accuracy_band,
        )
        metrics |= rm_metrics
    elif judgments is not None and verdicts is not None:
        rm_rows, rm_metrics = rm_samples(
            rollouts,
            judgments,
            verdicts,
            policy,
            parse_failure_penalty=config.reward_model.parse_failure_penalty,
            eps=adv.eps,
            band=config.reward_model.accuracy_band,
            outcome_weight=adv.outcome_weight,
            balance=config.reward_model.balance,
        )
        metrics |= rm_metrics
    outputs["rm_samples"] = run.write(rm_rows, r, "rm_samples")
    outputs["test_samples"] = run.write(test_rows, r, "test_samples")
    return outputs, metrics
