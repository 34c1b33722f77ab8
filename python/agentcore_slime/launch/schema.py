"""The env-file schema of ``bin/train``: every key, its type, default and meaning.

One table drives validation (:mod:`.validate`), the resolved ``runs/<EXP_ID>/env`` file
and the reference in docs/launcher.md, so the three cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    """How the text of a value is checked and converted."""

    STR = "string"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    PATH = "path"
    WORDS = "shell words"


@dataclass(frozen=True)
class Key:
    """One env-file key.

    :param name: the key as written in the env file (uppercase, unprefixed).
    :param kind: how its value is parsed.
    :param default: the default as env-file text; ``None`` = unset (or computed, see ``note``).
    :param help: one line for the reference table.
    :param required: the env file must set it.
    :param minimum: smallest allowed number (ints and floats).
    :param exclusive_min: ``minimum`` itself is not allowed.
    :param maximum: largest allowed number.
    :param choices: the allowed values of a string.
    """

    name: str
    kind: Kind
    default: str | None
    help: str
    required: bool = False
    minimum: float | None = None
    exclusive_min: bool = False
    maximum: float | None = None
    choices: tuple[str, ...] = ()


def _pos_int(name: str, default: str | None, help: str) -> Key:
    return Key(name, Kind.INT, default, help, minimum=1)


def _pos_float(name: str, default: str | None, help: str) -> Key:
    return Key(name, Kind.FLOAT, default, help, minimum=0, exclusive_min=True)


KEYS: tuple[Key, ...] = (
    # --- experiment (required) ---
    Key("EXP_ID", Kind.STR, None, "experiment name: runs/<EXP_ID>/ and the S3 key prefix", required=True),
    Key("S3_BUCKET", Kind.STR, None, "bucket the agent writes its results to", required=True),
    Key(
        "MODEL_DIR", Kind.PATH, None, "local HF model directory (--hf-checkpoint, --ref-load)", required=True
    ),
    Key(
        "DATA_PATH",
        Kind.PATH,
        None,
        "training JSONL: one row per prompt, `metadata` = agent payload",
        required=True,
    ),
    Key(
        "MODEL_TYPE",
        Kind.STR,
        None,
        "slime model script name: $SLIME_DIR/scripts/models/<MODEL_TYPE>.sh",
        required=True,
    ),
    Key("AGENT_RUNTIME_ARN", Kind.STR, None, "the deployed ACR agent (exactly one of this and AGENT_URL)"),
    Key("AGENT_URL", Kind.STR, None, "a locally running agent container, for debugging without ACR"),
    # --- cluster ---
    _pos_int("NUM_GPUS", "8", "GPUs on this node (Ray head, actor GPUs per node)"),
    _pos_int("TP_SIZE", "2", "Megatron tensor-parallel size; must divide NUM_GPUS"),
    _pos_int("ROLLOUT_GPUS_PER_ENGINE", "2", "GPUs per SGLang engine; must divide NUM_GPUS"),
    _pos_int("ROLLOUT_NUM_GPUS", None, "--variant async only: GPUs for SGLang (default: NUM_GPUS / 2)"),
    Key("SLIME_DIR", Kind.PATH, "/root/slime", "slime checkout (train.py, scripts/models/)"),
    Key("MEGATRON_DIR", Kind.PATH, "/root/Megatron-LM", "Megatron-LM checkout (put on PYTHONPATH)"),
    Key("CUDA_HOME", Kind.PATH, None, "pin this CUDA toolkit (unset = inherit the environment)"),
    # --- toolkit / ACR (toolkit.yaml) ---
    Key("MODEL_ID", Kind.STR, "default", "model name the agents send to the gateway"),
    _pos_int("ACR_TIMEOUT", "900", "seconds an episode may take before it counts as failed"),
    _pos_int("ACR_TPS_LIMIT", "25", "ACR invocations per second (service quota)"),
    _pos_int("MAX_CONCURRENT", "100", "concurrent agent sessions"),
    _pos_int("MAX_POOL_CONNECTIONS", None, "boto3 connection pool size (default: MAX_CONCURRENT)"),
    Key("GATEWAY_HOST", Kind.STR, None, "gateway bind address (unset = an address agents can reach)"),
    Key("GATEWAY_PORT", Kind.INT, "9090", "gateway port (0 = any free port)", minimum=0, maximum=65535),
    Key(
        "REWARD_POSTPROCESSING",
        Kind.STR,
        "grpo",
        "episode reward normalization",
        choices=("grpo", "identity"),
    ),
    Key("SGLANG_TOOL_CALL_PARSER", Kind.STR, "qwen", "SGLang/gateway tool-call parser (empty = none)"),
    Key("SGLANG_REASONING_PARSER", Kind.STR, None, "SGLang/gateway reasoning parser (unset = none)"),
    _pos_int("SGLANG_DATA_PARALLEL_SIZE", "1", "SGLang data-parallel size (--sglang-data-parallel-size)"),
    Key("CUMULATIVE_TOKEN_MODE", Kind.BOOL, "false", "gateway keeps one growing token sequence per session"),
    Key("RENDERER_FAMILY", Kind.STR, "auto", "chat renderer family (auto = infer from MODEL_DIR)"),
    Key(
        "GATEWAY_LOG_LEVEL",
        Kind.STR,
        "warning",
        "gateway log level",
        choices=("debug", "info", "warning", "error", "critical"),
    ),
    # --- rollout and training hyperparameters ---
    _pos_int("ROLLOUT_BATCH_SIZE", "32", "prompts per rollout"),
    _pos_int("N_SAMPLES_PER_PROMPT", "8", "episodes per prompt (the GRPO group)"),
    _pos_int("ROLLOUT_MAX_RESPONSE_LEN", "1024", "max new tokens per model call"),
    _pos_float("ROLLOUT_TEMPERATURE", "1.0", "sampling temperature"),
    _pos_float("LR", "1e-6", "learning rate (constant)"),
    _pos_float("EPS_CLIP", "0.2", "PPO clip (low)"),
    _pos_float("EPS_CLIP_HIGH", "0.28", "PPO clip (high)"),
    Key("WEIGHT_DECAY", Kind.FLOAT, "0.1", "AdamW weight decay", minimum=0),
    Key("ADAM_BETA2", Kind.FLOAT, "0.98", "Adam beta2", minimum=0, exclusive_min=True, maximum=1),
    Key(
        "SGLANG_MEM_FRACTION_STATIC",
        Kind.FLOAT,
        "0.7",
        "GPU memory fraction for SGLang weights + KV cache",
        minimum=0,
        exclusive_min=True,
        maximum=1,
    ),
    _pos_int("SGLANG_CONTEXT_LENGTH", None, "SGLang context length (unset = the model's)"),
    _pos_int("MAX_TOKENS_PER_GPU", "9216", "dynamic batch size: tokens per GPU per micro-batch"),
    _pos_int("NUM_ROLLOUT", "1", "training steps (rollouts); 1 = smoke test"),
    Key("WANDB_PROJECT", Kind.STR, None, "wandb project (wandb is on only when WANDB_API_KEY is exported)"),
    Key("WANDB_GROUP", Kind.STR, None, "wandb group (default: EXP_ID)"),
    Key("EXTRA_FLAGS", Kind.WORDS, None, "more slime/Megatron/SGLang flags, shell words, appended last"),
    # --- evaluation ---
    Key("VAL_DATA_PATH", Kind.PATH, None, "validation JSONL (unset = no evaluation)"),
    _pos_int("EVAL_INTERVAL", "10", "evaluate every N rollouts"),
    _pos_int("N_SAMPLES_PER_EVAL_PROMPT", "1", "episodes per validation prompt"),
    Key("EVAL_TEMPERATURE", Kind.FLOAT, "0.0", "eval sampling temperature", minimum=0),
    _pos_int("EVAL_MAX_RESPONSE_LEN", None, "eval max new tokens (default: ROLLOUT_MAX_RESPONSE_LEN)"),
    # --- checkpoints ---
    Key("SAVE_DIR", Kind.PATH, None, "Megatron checkpoints; a rerun resumes from the latest one here"),
    _pos_int("SAVE_INTERVAL", "100", "save every N rollouts (and after the last one)"),
    Key("SAVE_HF", Kind.BOOL, "false", "also write HF checkpoints to SAVE_DIR/hf/{rollout_id}"),
)

KEYS_BY_NAME: dict[str, Key] = {key.name: key for key in KEYS}

#: Never accepted from an env file or --set: they come from the process environment at run
#: time and are never written under runs/ (any other AWS_* name is refused as well).
SECRET_NAMES: tuple[str, ...] = ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_KEY")


def is_secret(name: str) -> bool:
    """Whether ``name`` is a credential that must come from the environment.

    :param name: an env-file key.
    """
    return name in SECRET_NAMES or name.startswith("AWS_")


#: defaults that are computed from other keys or at run time, as the reference shows them
_SHOWN_DEFAULTS = {
    "AGENT_RUNTIME_ARN": "one of the two is required",
    "AGENT_URL": "one of the two is required",
    "MAX_POOL_CONNECTIONS": "`MAX_CONCURRENT`",
    "EVAL_MAX_RESPONSE_LEN": "`ROLLOUT_MAX_RESPONSE_LEN`",
    "SAVE_DIR": "`runs/<EXP_ID>/checkpoints`",
    "WANDB_GROUP": "`EXP_ID`",
    "GATEWAY_HOST": "chosen at run time",
    "ROLLOUT_NUM_GPUS": "`NUM_GPUS / 2`",
}


def reference_table() -> str:
    """The env-file reference as a Markdown table (docs/launcher.md embeds it verbatim)."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key in KEYS:
        if key.name in _SHOWN_DEFAULTS:
            shown = _SHOWN_DEFAULTS[key.name]
        elif key.required:
            shown = "**required**"
        elif key.default is None:
            shown = "unset"
        else:
            shown = f"`{key.default}`"
        kind = " \\| ".join(key.choices) if key.choices else key.kind.value
        lines.append(f"| `{key.name}` | {kind} | {shown} | {key.help.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference_table(), end="")
