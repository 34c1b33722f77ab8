"""slime's rollout function: run agent episodes on AgentCore and return training Samples.

slime loads ``agentcore_slime.rollout.generate_rollout`` (``--rollout-function-path``)
and calls it once per step inside its rollout actor, a long-lived process without a
GPU. For every Sample of the step (one agent episode each) it creates a gateway
session, starts the agent with the ``_rollout`` config, waits for the agent's reward
in S3, merges the session's token traces into Samples and deletes the session.

One module per job:

- :mod:`.runtime`: what lives across calls (config, gateway, thread pool, event loop), created
  at the first call; tests swap ``runtime._STATE.gateway_factory`` for a stand-in gateway;
- :mod:`.episode`: one episode end to end (gateway session, agent run, traces -> Samples);
- :mod:`.train_step`: a training step, the over-sampling scheduler over prompt groups
  (:mod:`.sampling`), padding for slime's data-parallel split (:mod:`.padding`);
- :mod:`.eval_step`: an eval step over slime's eval datasets;
- :mod:`.record`: metrics.jsonl, the recorded episodes and the log lines of a step;
- :mod:`.trace_log`: every model call as a JSON line in ``$TRACE_LOG``;
- :mod:`.costs`: the run's ledger (what each step cost) and the budget's stop;

and the helpers only the rollout uses: :mod:`.traces` (an episode's call traces -> Samples),
:mod:`.samples` (the toolkit's record on a Sample), :mod:`.step_stats` (a step's counts),
:mod:`.gc_pauses` (no full garbage collection while a step runs),
:mod:`.rewards` (the reward hook slime loads as ``agentcore_slime.rewards``).
"""

from __future__ import annotations

from typing import Any

from agentcore_slime.rollout.eval_step import _eval_step
from agentcore_slime.rollout.gc_pauses import full_collections_deferred
from agentcore_slime.rollout.runtime import _STATE, _ensure_gateway
from agentcore_slime.rollout.train_step import _train_step

__all__ = ["generate_rollout"]


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's rollout function (``--rollout-function-path agentcore_slime.rollout.generate_rollout``).

    :param args: slime's args, including the toolkit.yaml keys (``--custom-config-path``).
    :param rollout_id: the step number.
    :param data_source: slime's data source (``get_samples(n)`` returns prompt groups).
    :param evaluation: run the eval datasets instead of a training step.
    :returns: ``RolloutFnTrainOutput`` (one list of Samples per group, in group order,
        padded for slime's data-parallel split) or ``RolloutFnEvalOutput``.
    :raises ConfigError: at the first call, when a setting is missing or invalid.
    :raises RuntimeError: when every episode of a training step failed, or the gateway process
        died and cannot be started again.
    """
    runtime = _STATE.get(args)
    _ensure_gateway(runtime.gateway)
    with full_collections_deferred():
        if evaluation:
            return runtime.run(_eval_step(runtime, args, rollout_id))
        return runtime.run(_train_step(runtime, args, rollout_id, data_source))
