"""Disk check: SAVE_DIR has room for the checkpoints the run will write.

A Megatron checkpoint holds the bf16 weights and the optimizer state (fp32 master weights and
two Adam moments): 14 bytes per parameter. SAVE_HF adds 2 bytes per parameter per save. slime
keeps every save, one per SAVE_INTERVAL rollouts and one after the last rollout. The parameter
count is computed from config.json (dense and MoE layers); it is an estimate, good to ~10 %.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from .context import Context
from .model import load_config_json
from .report import Result, failed, passed, warned

BYTES_PER_PARAM_CHECKPOINT = 14
BYTES_PER_PARAM_HF = 2
GB = 1024**3


def parameter_count(hf: dict[str, Any]) -> int | None:
    """The model's parameter count from config.json, or ``None`` when it lacks the sizes.

    :param hf: config.json (its text_config for multimodal models).
    """
    try:
        hidden, layers, vocab = int(hf["hidden_size"]), int(hf["num_hidden_layers"]), int(hf["vocab_size"])
        heads = int(hf["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        return None
    head_dim = int(hf.get("head_dim") or hidden // heads)
    groups = int(hf.get("num_key_value_heads") or heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * groups * head_dim
    experts = int(hf.get("num_experts") or hf.get("n_routed_experts") or hf.get("num_local_experts") or 0)
    ffn = int(hf.get("intermediate_size") or 4 * hidden)
    if experts:
        expert_ffn = int(hf.get("moe_intermediate_size") or ffn)
        shared = int(hf.get("shared_expert_intermediate_size") or 0)
        mlp = 3 * hidden * (experts * expert_ffn + shared)
    else:
        mlp = 3 * hidden * ffn
    embeddings = vocab * hidden * (1 if hf.get("tie_word_embeddings") else 2)
    return embeddings + layers * (attention + mlp)


def existing_parent(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (SAVE_DIR may not exist yet).

    :param path: any path.
    """
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(ctx: Context) -> list[Result]:
    """Free space under SAVE_DIR against one and all of the run's checkpoints.

    :param ctx: the check context.
    """
    name = "disk.save-dir"
    if ctx.variant == "eval":
        return [passed(name, "--variant eval writes no checkpoints")]
    save_dir = Path(str(ctx.value("SAVE_DIR")))
    hf, problem = load_config_json(Path(str(ctx.value("MODEL_DIR"))))
    params = parameter_count(hf) if hf is not None else None
    if params is None:
        return [
            warned(
                name,
                f"cannot size a checkpoint ({problem or 'config.json lacks the sizes'})",
                "fix MODEL_DIR",
            )
        ]
    per_save = params * (BYTES_PER_PARAM_CHECKPOINT + (BYTES_PER_PARAM_HF if ctx.value("SAVE_HF") else 0))
    saves = math.ceil(int(str(ctx.value("NUM_ROLLOUT"))) / int(str(ctx.value("SAVE_INTERVAL"))))
    free = shutil.disk_usage(existing_parent(save_dir)).free
    found = (
        f"{free / GB:.1f} GiB free at {save_dir}; a checkpoint of this {params / 1e9:.1f}B-parameter "
        f"model is ~{per_save / GB:.1f} GiB, {saves} save(s) ~{saves * per_save / GB:.1f} GiB"
    )
    if free < per_save:
        return [failed(name, found, "free space or point SAVE_DIR at a larger disk")]
    if free < saves * per_save:
        return [warned(name, found, "raise SAVE_INTERVAL, free space, or point SAVE_DIR at a larger disk")]
    return [passed(name, found)]
