"""The scripts ``bin/train --variant`` can render, and what distinguishes them.

Evaluation is ``bin/eval`` (one SGLang server, no Megatron): ``--variant eval`` is refused
with a pointer to it (:data:`REPLACED`).

All variants render from one template (:data:`TEMPLATE`); what differs is data here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the one Jinja template under templates/ every variant renders
TEMPLATE = "train.sh.j2"


@dataclass(frozen=True)
class Variant:
    """One kind of run.

    :param script: the rendered script's file name in runs/<EXP_ID>/ (its log is <stem>.log).
    :param entry: slime's entry point, relative to SLIME_DIR.
    :param colocate: training and rollout share every GPU (``--colocate``); otherwise the GPUs
        are split (``--rollout-num-gpus``), as train_async.py requires.
    :param summary: the ``# Summary:`` of the rendered script (``{exp_id}`` is filled in).
    """

    script: str
    entry: str
    colocate: bool
    summary: str


VARIANTS: dict[str, Variant] = {
    "sync": Variant(
        "train.sh",
        "train.py",
        True,
        "train {exp_id} with slime (synchronous, colocated: train.py)",
    ),
    "async": Variant(
        "train_async.sh",
        "train_async.py",
        False,
        "train {exp_id} with slime (one-step off-policy, GPUs split: train_async.py)",
    ),
}

#: variants that were replaced by another command -> how to run it now
REPLACED: dict[str, str] = {
    "eval": "evaluation is bin/eval now: bin/eval ENV_FILE [--checkpoint DIR] [--limit N] "
    "(see bin/eval --help)",
}
