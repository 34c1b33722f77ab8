"""Rollout routing replay against the model: refused before anything starts when it cannot work.

slime's ``--use-rollout-routing-replay`` makes slime start every engine with SGLang's
``--enable-return-routed-experts`` (slime owns that flag: ``--sglang-enable-return-routed-experts``
is not one of slime's) and replays the engine's routed experts in Megatron. SGLang captures
``num_hidden_layers x num_experts_per_tok`` ids per token (``state_capturer/routed_experts.py``)
and slime reshapes them to ``--num-layers x --moe-router-topk``; a model without experts has no
routing to replay. Without these checks a run fails only after the first rollout was generated
(slime's actor: ``rollout_routed_experts is required ...`` or a reshape error).

``--use-routing-replay`` (the trainer replays its own routing of the logprob pass in the
training pass) costs no rollout bytes: the cheaper choice when engine and trainer routing
agree closely (docs/rollout.md, "MoE models: routing replay").
"""

from __future__ import annotations

from typing import Any

from .report import Result, failed, passed

ROLLOUT_REPLAY = "--use-rollout-routing-replay"
#: config.json keys of the routed experts per layer, by model family
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
CHEAPER = "--use-routing-replay replays the trainer's own routing at no rollout cost"
MEGATRON_TOPK = "2"  # Megatron's --moe-router-topk default, for a script that sets none


def experts_of(hf: dict[str, Any]) -> int:
    """The routed experts per layer config.json declares (0: a dense model)."""
    for key in EXPERT_KEYS:
        value = hf.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def check_routing_replay(hf: dict[str, Any], flags: dict[str, list[str]]) -> list[Result]:
    """One result when the command line asks for rollout routing replay, else none.

    :param hf: config.json (its ``text_config`` for multimodal models).
    :param flags: the effective flags (MODEL_ARGS then the pass-through flags: the last wins).
    """
    if ROLLOUT_REPLAY not in flags:
        return []
    name, remove = "model.routing-replay", f"remove {ROLLOUT_REPLAY} from EXTRA_FLAGS / the flags after --"
    experts = experts_of(hf)
    if not experts:
        found = f"{ROLLOUT_REPLAY}, but config.json declares no experts (a dense model)"
        return [failed(name, found, remove)]
    topk, layers = hf.get("num_experts_per_tok"), hf.get("num_hidden_layers")
    if not isinstance(topk, int) or not isinstance(layers, int):
        found = f"{ROLLOUT_REPLAY}, but config.json has no num_experts_per_tok / num_hidden_layers"
        return [failed(name, found + " (SGLang sizes the routed experts it returns by them)", remove)]
    ours = (flags.get("--moe-router-topk") or [MEGATRON_TOPK])[0]
    if not ours.isdigit() or int(ours) != topk:
        found = f"--moe-router-topk {ours}, but config.json has num_experts_per_tok {topk}"
        why = ": the engine's routed experts would not fit slime's rows"
        return [failed(name, found + why, f"add --moe-router-topk {topk} to EXTRA_FLAGS")]
    per_token = 4 * layers * topk
    return [
        passed(
            name,
            f"{layers} layers x top-{topk} of {experts} experts: {per_token:,} bytes per token on the wire "
            f"and in the gateway ({CHEAPER})",
        )
    ]
