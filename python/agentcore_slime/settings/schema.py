"""Every setting of the toolkit, declared once: env-file name, toolkit.yaml key, type, default,
choices, one line of doc.

Everything else derives from :data:`KEYS`: ``bin/train``'s validation (:mod:`.validate`), the
resolved ``runs/<EXP_ID>/env``, the rendered ``toolkit.yaml``, the fields of the rollout's
:class:`~.config.ToolkitConfig` and of the gateway's
:class:`~agentcore_slime.gateway.config.GatewayConfig` (types, defaults), what they read, and
the reference tables of the docs.

Adding a setting is one ``Key(...)`` below plus its use: ``rollout=True`` puts it into
toolkit.yaml as ``name.lower()`` and onto ``ToolkitConfig``; ``gateway="field"`` also makes it
that ``GatewayConfig`` field. The fields of those two classes and the tables are generated
blocks (:data:`GENERATED`, tests check them); rewrite them all with ``PYTHONPATH=python python3
-m agentcore_slime.settings.schema --write docs/*.md python/agentcore_slime/*/config.py``.
Standard library only: the launcher runs right after ``git clone``.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable
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


#: the choice that turns an optional feature off (the parsers): toolkit.yaml's ``null``
#: means "the default", so "off" needs a word of its own
NONE = "none"
#: the choice "chosen from MODEL_DIR" (the parsers and RENDERER_FAMILY: settings/model_family.py)
AUTO = "auto"

#: SGLang ``--tool-call-parser`` names the gateway can parse too -> the ``renderers`` tool parser
#: it uses for chat-template models (tests keep the values in step with the installed library;
#: None: renderers has none, the gateway's own parser reads the calls, gateway/tool_calls.py)
TOOL_CALL_PARSERS: dict[str, str | None] = {
    "qwen": "qwen3",  # Qwen2.5 Hermes-style <tool_call>{json}</tool_call>
    "qwen25": "qwen3",
    "hermes": "qwen3",
    "qwen3_coder": "qwen3.5",  # <tool_call><function=..><parameter=..>
    "glm45": "glm",  # <tool_call>NAME\n<arg_key>..</arg_key>\n<arg_value>..</arg_value>
    "glm": "glm",  # SGLang's alias of glm45
    "glm47": "glm",  # GLM-4.7/5: no newline after the name
    "deepseekv3": "deepseek-v3",
    "kimi_k2": None,  # Kimi-K2: <|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{json}
    "minimax-m2": None,  # MiniMax-M2: <minimax:tool_call><invoke name=".."><parameter name="..">
    "deepseekv31": None,  # DeepSeek-V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}
    "llama3": None,  # Llama 3.x: <|python_tag|>{"name": .., "parameters": ..}
    "mimo": None,  # MiMo-V2: <tool_call><function=NAME><parameter=K>V</parameter> (values unescaped)
    "gemma4": None,  # Gemma 4: <|tool_call>call:NAME{key:<|"|>text<|"|>,n:3}<tool_call|>
}
#: SGLang ``--reasoning-parser`` names the gateway can parse too -> ``renderers`` reasoning parser
REASONING_PARSERS: dict[str, str] = {
    "qwen3": "think",
    "qwen3-thinking": "think",
    "deepseek-r1": "think",
    "glm45": "think",
    # (not "kimi": SGLang's reads Kimi-VL's ◁think▷ markers; Kimi-K2 is kimi_k2)
    "kimi_k2": "think",
    "deepseek-v3": "think",
    "mimo": "think",
    # SGLang reads MiniMax-M2's text as reasoning up to </think> even without <think>; the
    # minimax-m2 renderers family (RENDERER_FAMILY=auto) splits it itself
    "minimax": "think",
}
#: renderer families of the pinned ``renderers`` (0.1.12): ``auto`` = infer from MODEL_DIR,
#: ``default`` = the model's own chat template (a test compares this with the installed library)
RENDERER_FAMILIES: tuple[str, ...] = (
    "auto",
    "default",
    "deepseek-r1",
    "deepseek-v3",
    "deepseek-v4",
    "gemma4",
    "glm-4.5",
    "glm-5",
    "glm-5.1",
    "glm-5.3",
    "gpt-oss",
    "hy3",
    "inkling",
    "kimi-k2",
    "kimi-k2.5",
    "laguna-m.1",
    "laguna-s-2.1",
    "laguna-xs-2.1",
    "laguna-xs.2",
    "llama-3",
    "minimax-m2",
    "nemotron-3",
    "nemotron-3-ultra",
    "nemotron-3.5",
    "prime-qwen3",
    "qwen3",
    "qwen3-vl",
    "qwen3.5",
    "qwen3.6",
    "qwen3.8",
)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: episode reward post-processing (rewards.py): ``grpo`` = what slime's own reward
#: normalization computes for the run's --advantage-estimator, per episode; ``identity`` = raw
REWARD_MODES = ("grpo", "identity")
#: ``exclude``: episodes failed by infrastructure stay out of their group's statistics;
#: ``zero-reward``: they count as reward 0 in their group (the rule before issue 13)
INFRA_FAILURE_MODES = ("exclude", "zero-reward")


@dataclass(frozen=True)
class Key:
    """One setting.

    :param name: the key as written in the env file (uppercase, unprefixed); also the
        environment variable the rollout and the gateway fall back to outside bin/train.
    :param kind: how its value is parsed.
    :param default: the default as env-file text; ``None`` = unset (or derived, see below).
    :param help: one line for the reference tables.
    :param required: the env file must set it.
    :param minimum: smallest allowed number (ints and floats).
    :param exclusive_min: ``minimum`` itself is not allowed.
    :param maximum: largest allowed number.
    :param choices: the allowed values of a string.
    :param rollout: toolkit.yaml carries it to the rollout as :attr:`yaml_key`.
    :param gateway: the ``GatewayConfig`` field it sets ("" = the gateway does not read it).
    :param default_from: unset = the value of this other key.
    :param shown_default: the default column of the reference when it is computed at run time.
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
    rollout: bool = False
    gateway: str = ""
    default_from: str = ""
    shown_default: str = ""

    @property
    def yaml_key(self) -> str:
        """The toolkit.yaml key (and attribute of slime's args) of a rollout setting."""
        return self.name.lower()


def _pos_int(name: str, default: str | None, help: str, **more: object) -> Key:
    return Key(name, Kind.INT, default, help, minimum=1, **more)  # type: ignore[arg-type]


def _pos_float(name: str, default: str | None, help: str, **more: object) -> Key:
    return Key(name, Kind.FLOAT, default, help, minimum=0, exclusive_min=True, **more)  # type: ignore[arg-type]


def _usd(name: str, default: str, help: str) -> Key:
    return Key(name, Kind.FLOAT, default, help, minimum=0, rollout=True)


KEYS: tuple[Key, ...] = (
    # --- experiment (required) ---
    Key(
        "EXP_ID",
        Kind.STR,
        None,
        "experiment name: runs/<EXP_ID>/ and the S3 key prefix",
        required=True,
        rollout=True,
    ),
    Key("S3_BUCKET", Kind.STR, None, "bucket the agent writes its results to", required=True, rollout=True),
    Key(
        "MODEL_DIR",
        Kind.PATH,
        None,
        "local HF model directory (--hf-checkpoint, --ref-load)",
        required=True,
        gateway="model_dir",
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
    Key(
        "AGENT_RUNTIME_ARN",
        Kind.STR,
        None,
        "the deployed ACR agent (exactly one of this and AGENT_URL)",
        rollout=True,
        shown_default="one of the two is required",
    ),
    Key(
        "AGENT_URL",
        Kind.STR,
        None,
        "a locally running agent container, for debugging without ACR",
        rollout=True,
        shown_default="one of the two is required",
    ),
    # --- cluster ---
    _pos_int("NUM_GPUS", "8", "GPUs per node (Ray head and each worker; actor GPUs per node)"),
    _pos_int("TP_SIZE", "2", "Megatron tensor-parallel size; must divide NUM_GPUS"),
    _pos_int("ROLLOUT_GPUS_PER_ENGINE", "2", "GPUs per SGLang engine; must divide NUM_GPUS"),
    _pos_int(
        "ROLLOUT_NUM_GPUS",
        None,
        "--variant async only: GPUs for SGLang (default: NUM_GPUS / 2)",
        shown_default="`NUM_GPUS / 2`",
    ),
    Key("SLIME_DIR", Kind.PATH, "/root/slime", "slime checkout (train.py, scripts/models/)"),
    Key("MEGATRON_DIR", Kind.PATH, "/root/Megatron-LM", "Megatron-LM checkout (put on PYTHONPATH)"),
    Key("CUDA_HOME", Kind.PATH, None, "pin this CUDA toolkit (unset = inherit the environment)"),
    _pos_int(
        "NUM_NODES",
        "1",
        "nodes in the Ray cluster: this head plus NUM_NODES-1 workers (join.sh)",
        rollout=True,  # the GPU part of the run's cost (NODE_HOUR_USD x NUM_NODES)
    ),
    _pos_int("JOIN_TIMEOUT", "600", "seconds the head waits for the workers' GPUs before it gives up"),
    Key(
        "RAY_TEMP_DIR",
        Kind.PATH,
        None,
        "this node's Ray temp dir, at most 43 characters (unset: private to you, see docs/launcher.md)",
        shown_default="`/tmp/agentcore-slime-<uid>/ray`",
    ),
    Key("RAY_PORT", Kind.INT, "6379", "Ray GCS port of the head (workers join it)", minimum=1, maximum=65535),
    Key("RAY_DASHBOARD_PORT", Kind.INT, "8265", "Ray dashboard / job API port", minimum=1, maximum=65535),
    Key("RAY_CLIENT_SERVER_PORT", Kind.INT, "10001", "Ray client server port", minimum=1, maximum=65535),
    Key("RAY_DASHBOARD_AGENT_PORT", Kind.INT, "52365", "Ray dashboard agent port", minimum=1, maximum=65535),
    Key(
        "RAY_AUTH",
        Kind.STR,
        "token",
        "Ray token authentication: `token` (a Ray without it is refused) or `none` (explicit opt-out)",
        choices=("token", NONE),
    ),
    Key("RAY_TLS", Kind.BOOL, "false", "Ray's own TLS on its gRPC (RAY_USE_TLS); needs the 3 files below"),
    Key("RAY_TLS_CA_CERT", Kind.PATH, None, "RAY_TLS: the CA that signed each node's certificate"),
    Key(
        "RAY_TLS_SERVER_CERT",
        Kind.PATH,
        None,
        "RAY_TLS: this node's certificate (names its address); workers: same path, their own file",
    ),
    Key("RAY_TLS_SERVER_KEY", Kind.PATH, None, "RAY_TLS: this node's private key (mode 0600)"),
    # --- toolkit / ACR (toolkit.yaml) ---
    Key(
        "MODEL_ID",
        Kind.STR,
        "default",
        "model name the agents send to the gateway",
        rollout=True,
        gateway="model_id",
    ),
    _pos_float("ACR_TIMEOUT", "900", "seconds an episode may take before it counts as failed", rollout=True),
    _pos_float("ACR_TPS_LIMIT", "25", "ACR invocations per second (service quota)", rollout=True),
    _pos_int("MAX_CONCURRENT", "100", "concurrent agent sessions", rollout=True),
    _pos_int(
        "MAX_POOL_CONNECTIONS",
        None,
        "boto3 connection pool size and I/O threads (default: MAX_CONCURRENT)",
        rollout=True,
        default_from="MAX_CONCURRENT",
    ),
    Key(
        "GATEWAY_HOST",
        Kind.STR,
        None,
        "gateway bind address (unset = an address agents can reach)",
        rollout=True,
        gateway="host",
        shown_default="chosen at run time",
    ),
    Key(
        "GATEWAY_PORT",
        Kind.INT,
        "9090",
        "gateway port (0 = any free port); process i of GATEWAY_PROCESSES listens on GATEWAY_PORT + i",
        minimum=0,
        maximum=65535,
        rollout=True,
        gateway="port",
    ),
    Key(
        "GATEWAY_TLS_CERT",
        Kind.PATH,
        None,
        "serve the gateway over HTTPS with this certificate chain (PEM, with GATEWAY_TLS_KEY; "
        "unset = plain HTTP): agents must trust it (docs/launcher.md, 'Operating the gateway')",
        rollout=True,
        gateway="tls_cert",
    ),
    Key(
        "GATEWAY_TLS_KEY",
        Kind.PATH,
        None,
        "GATEWAY_TLS_CERT's private key (PEM; a file of yours that only you can read)",
        rollout=True,
        gateway="tls_key",
    ),
    Key(
        "GATEWAY_PROCESSES",
        Kind.INT,
        "0",
        "gateway processes, each serving its own sessions on a core (0 = auto: one per 128 "
        "MAX_CONCURRENT, at most one per 8 cores, at most 8)",
        minimum=0,
        maximum=64,
        rollout=True,
    ),
    Key(
        "REWARD_POSTPROCESSING",
        Kind.STR,
        "grpo",
        "episode reward normalization: grpo = slime's for --advantage-estimator, per episode",
        choices=REWARD_MODES,
        rollout=True,
    ),
    Key(
        "SGLANG_TOOL_CALL_PARSER",
        Kind.STR,
        AUTO,
        "SGLang/gateway tool-call parser (auto = chosen from MODEL_DIR, none = off)",
        choices=(AUTO, *TOOL_CALL_PARSERS, NONE),
        rollout=True,
        gateway="tool_call_parser",
    ),
    Key(
        "SGLANG_REASONING_PARSER",
        Kind.STR,
        AUTO,
        "SGLang/gateway reasoning parser (auto = chosen from MODEL_DIR, none = off)",
        choices=(AUTO, *REASONING_PARSERS, NONE),
        rollout=True,
        gateway="reasoning_parser",
    ),
    Key(
        "INFRA_FAILURES",
        Kind.STR,
        "exclude",
        "episodes failed by infrastructure: out of the group statistics, or reward 0 (old rule)",
        choices=INFRA_FAILURE_MODES,
        rollout=True,
    ),
    _pos_int(
        "OVER_SAMPLING_BATCH_SIZE",
        None,
        "groups started per fetch (--over-sampling-batch-size); above ROLLOUT_BATCH_SIZE the slowest are cut",
        shown_default="`ROLLOUT_BATCH_SIZE`",
    ),
    Key(
        "MAX_EXTRA_GROUPS",
        Kind.INT,
        None,
        "groups a step may start beyond ROLLOUT_BATCH_SIZE (over-sampling, dynamic filter)",
        minimum=0,
        rollout=True,
        shown_default="`OVER_SAMPLING_BATCH_SIZE`",
    ),
    _pos_int(
        "SGLANG_DATA_PARALLEL_SIZE",
        "1",
        "SGLang data-parallel size (--sglang-data-parallel-size); bin/eval: its engines "
        "(unset there = NUM_GPUS / EVAL_TP_SIZE)",
    ),
    Key(
        "CUMULATIVE_TOKEN_MODE",
        Kind.BOOL,
        "true",
        "gateway extends one token sequence per conversation while the messages extend the "
        "previous call's (false: re-render every call, the old default)",
        rollout=True,
        gateway="cumulative_token_mode",
    ),
    Key(
        "CUMULATIVE_BRIDGE",
        Kind.STR,
        "new-messages",
        "how cumulative mode adds new messages: new-messages = their own render after the sampled "
        "tokens (one sample per episode); template = only where the chat template's re-render "
        "extends the previous call (else a full render, a new sample)",
        choices=("new-messages", "template"),
        rollout=True,
        gateway="cumulative_bridge",
    ),
    Key(
        "RENDERER_FAMILY",
        Kind.STR,
        "auto",
        "chat renderer family (auto = infer from MODEL_DIR, default = the chat template)",
        choices=RENDERER_FAMILIES,
        rollout=True,
        gateway="renderer_family",
    ),
    Key(
        "GATEWAY_LOG_LEVEL",
        Kind.STR,
        "warning",
        "gateway log level",
        choices=LOG_LEVELS,
        rollout=True,
        gateway="log_level",
    ),
    _pos_float(
        "RESULT_POLL_INTERVAL",
        "0.25",
        "seconds between two S3 LISTs of a step's result prefix",
        rollout=True,
    ),
    Key(
        "RECORD_EPISODES",
        Kind.INT,
        "8",
        "episodes per step kept in runs/<EXP_ID>/episodes/ for bin/report, besides every failed one",
        minimum=0,
        rollout=True,
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
    _pos_int(
        "SGLANG_CONTEXT_LENGTH",
        None,
        "SGLang context length (unset = the model's)",
        gateway="context_length",
    ),
    _pos_int("MAX_TOKENS_PER_GPU", "9216", "dynamic batch size: tokens per GPU per micro-batch"),
    _pos_int("NUM_ROLLOUT", "1", "training steps (rollouts); 1 = smoke test"),
    Key("WANDB_PROJECT", Kind.STR, None, "wandb project (wandb is on only when WANDB_API_KEY is exported)"),
    Key("WANDB_GROUP", Kind.STR, None, "wandb group (default: EXP_ID)", default_from="EXP_ID"),
    Key("EXTRA_FLAGS", Kind.WORDS, None, "more slime/Megatron/SGLang flags, shell words, appended last"),
    # --- evaluation ---
    Key("VAL_DATA_PATH", Kind.PATH, None, "validation JSONL (unset = no evaluation)"),
    _pos_int("EVAL_INTERVAL", "10", "evaluate every N rollouts"),
    _pos_int("N_SAMPLES_PER_EVAL_PROMPT", "1", "episodes per validation prompt"),
    Key("EVAL_TEMPERATURE", Kind.FLOAT, "0.0", "eval sampling temperature", minimum=0),
    _pos_float(
        "EVAL_TIMEOUT",
        None,
        "seconds an eval step (or bin/eval's episodes) may take; an episode still running then "
        "fails (eval_timeout); unset = each episode bounded by ACR_TIMEOUT only",
        rollout=True,
    ),
    _pos_int(
        "EVAL_MAX_RESPONSE_LEN",
        None,
        "eval max new tokens (default: ROLLOUT_MAX_RESPONSE_LEN)",
        default_from="ROLLOUT_MAX_RESPONSE_LEN",
    ),
    _pos_int(
        "EVAL_TP_SIZE",
        None,
        "bin/eval: tensor-parallel size of its SGLang server (<= NUM_GPUS)",
        default_from="ROLLOUT_GPUS_PER_ENGINE",
    ),
    _pos_int("EVAL_HEALTH_TIMEOUT", "600", "bin/eval: seconds to wait for its SGLang server to be healthy"),
    Key(
        "EVAL_SGLANG_PORT",
        Kind.INT,
        "0",
        "bin/eval: SGLang server port (0 = any free port)",
        minimum=0,
        maximum=65535,
    ),
    Key("EVAL_SGLANG_FLAGS", Kind.WORDS, None, "bin/eval: more sglang.launch_server flags, shell words"),
    # --- cost and limits (docs/cost.md, "What will this cost?") ---
    _usd(
        "NODE_HOUR_USD",
        "0",
        "USD per GPU node-hour: GPU cost = this x NUM_NODES x wall time (0 = not counted)",
    ),
    _usd("ACR_VCPU_HOUR_USD", "0.0895", "AgentCore Runtime: USD per vCPU-hour of active CPU (2026 rate)"),
    _usd("ACR_GB_HOUR_USD", "0.00945", "AgentCore Runtime: USD per GB-hour of memory (2026 rate)"),
    Key(
        "ACR_ACTIVE_CPU_SHARE",
        Kind.FLOAT,
        "0.25",
        "AgentCore estimate: vCPUs in use over a session on average (I/O wait is free; max 2)",
        minimum=0,
        maximum=2,
        rollout=True,
    ),
    Key(
        "ACR_MEMORY_GB",
        Kind.FLOAT,
        "2",
        "AgentCore estimate: a session's peak memory in GB (max 8)",
        minimum=0,
        maximum=8,
        rollout=True,
    ),
    Key(
        "AGENT_COST_KEY",
        Kind.STR,
        "cost_usd",
        "key of the agent's result holding what it spent (LLM judges, APIs, tools), in USD",
        rollout=True,
    ),
    _pos_float(
        "BUDGET_USD",
        None,
        "stop the run cleanly, after a saved checkpoint, before it spends more (unset = no budget)",
        rollout=True,
    ),
    _pos_int(
        "MAX_CALLS_PER_EPISODE",
        None,
        "model calls one episode may make; the next gets a short final reply (unset = no cap)",
        rollout=True,
        gateway="max_calls_per_episode",
    ),
    _pos_int(
        "MAX_TOKENS_PER_EPISODE",
        None,
        "completion tokens one episode may sample; the next call gets a short final reply (unset = no cap)",
        rollout=True,
        gateway="max_tokens_per_episode",
    ),
    Key(
        "TRAIN_SIDE_CALLS",
        Kind.BOOL,
        "false",
        "train an agent's side calls too (a session title, a classifier: calls outside its main "
        "conversation; docs/agents.md); false = recorded and counted, not trained",
        rollout=True,
    ),
    # --- checkpoints ---
    Key(
        "SAVE_DIR",
        Kind.PATH,
        None,
        "Megatron checkpoints; a rerun resumes from the latest one here",
        shown_default="`runs/<EXP_ID>/checkpoints`",
    ),
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


#: the one boolean vocabulary, for env files, toolkit.yaml text and environment fallbacks
TRUE_WORDS, FALSE_WORDS = ("true", "1"), ("false", "0")

Value = str | int | float | bool | list[str] | None


def rollout_keys() -> tuple[Key, ...]:
    """The settings toolkit.yaml carries to the rollout, in declaration order."""
    return tuple(key for key in KEYS if key.rollout)


def gateway_keys() -> tuple[Key, ...]:
    """The settings the gateway reads (its ``GatewayConfig`` field is ``key.gateway``)."""
    return tuple(key for key in KEYS if key.gateway)


def parse_text(key: Key, text: str) -> Value:
    """Convert one value written as text (env file, --set, environment variable).

    Empty text means unset: the declared default (``None`` when there is none, or when it is
    derived from another key, see :attr:`Key.default_from`).

    :param key: the setting.
    :param text: the text as written.
    :raises ValueError: what is wrong, followed by what is expected (:func:`expected`).
    """
    text = text.strip() if key.kind is not Kind.WORDS else text
    if text == "" and key.default is not None:
        text = key.default
    if text.strip() == "":
        return None
    value = _CONVERTERS[key.kind](text)
    check_value(key, value)
    return value


def parse_typed(key: Key, value: object) -> Value:
    """Convert a value that may already be typed (a toolkit.yaml scalar), or text.

    ``None`` means unset, like empty text.

    :param key: the setting.
    :param value: the YAML value (``None``, bool, int, float or str).
    :raises ValueError: what is wrong (the value's type or range).
    """
    if value is None:
        return parse_text(key, "")
    if isinstance(value, str):
        return parse_text(key, value)
    typed: Value
    if key.kind is Kind.BOOL and isinstance(value, bool):
        typed = value
    elif key.kind is Kind.INT and isinstance(value, int) and not isinstance(value, bool):
        typed = value
    elif key.kind is Kind.FLOAT and isinstance(value, int | float) and not isinstance(value, bool):
        typed = float(value)
    else:
        raise ValueError(f"a {type(value).__name__} is not {_article(key)}")
    check_value(key, typed)
    return typed


def check_value(key: Key, value: Value) -> None:
    """Check a converted value against the key's range and choices.

    :raises ValueError: out of range or not one of the choices.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = key.minimum, key.maximum
        too_low = low is not None and (value <= low if key.exclusive_min else value < low)
        if too_low or (high is not None and value > high):
            raise ValueError("out of range")
    if key.choices and value not in key.choices:
        raise ValueError("not allowed")


def expected(key: Key) -> str:
    """What a valid value of ``key`` looks like (the "how to fix it" of an error).

    :param key: the setting.
    """
    if key.choices:
        return f"{key.name} must be one of: {', '.join(key.choices)}"
    if key.kind is Kind.BOOL:
        return f"{key.name} must be true, false, 1 or 0"
    if key.kind is Kind.WORDS:
        return f"{key.name} is split like shell words: balance its quotes"
    if key.kind in (Kind.STR, Kind.PATH):
        return f"{key.name} must be a string"
    return f"{key.name} must be {_article(key)}{_bounds(key)}"


def _article(key: Key) -> str:
    return {Kind.INT: "an integer", Kind.FLOAT: "a number", Kind.BOOL: "a boolean"}.get(key.kind, "a string")


def _bounds(key: Key) -> str:
    parts = []
    if key.minimum is not None:
        parts.append(f"{'>' if key.exclusive_min else '>='} {key.minimum:g}")
    if key.maximum is not None:
        parts.append(f"<= {key.maximum:g}")
    return " " + " and ".join(parts) if parts else ""


#: the largest integer any setting accepts: slime and Megatron keep counts in 32-bit tensors
#: and loops, where a larger value would overflow or never end
INT_MAX = 2**31 - 1


def _to_int(text: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ValueError("not an integer")
    if abs(int(text)) > INT_MAX:
        raise ValueError(f"too large (at most {INT_MAX})")
    return int(text)


def _to_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _to_bool(text: str) -> bool:
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise ValueError("not a boolean")


_CONVERTERS: dict[Kind, Callable[[str], Value]] = {
    Kind.STR: str,
    Kind.PATH: str,
    Kind.INT: _to_int,
    Kind.FLOAT: _to_float,
    Kind.BOOL: _to_bool,
    Kind.WORDS: shlex.split,
}


def shown_default(key: Key) -> str:
    """The default as the reference tables show it (Markdown).

    :param key: the setting.
    """
    if key.shown_default:
        return key.shown_default
    if key.default_from:
        return f"`{key.default_from}`"
    if key.required:
        return "**required**"
    return "unset" if key.default is None else f"`{key.default}`"


def _choices_text(key: Key) -> str:
    if len(key.choices) > 10:
        return f"{key.kind.value}: one of {len(key.choices)} names (docs/gateway.md)"
    return " \\| ".join(key.choices)


def _cell(text: str) -> str:
    return text.replace("|", "/")


def reference_table() -> str:
    """The env-file reference as a Markdown table (docs/launcher.md embeds it)."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key in KEYS:
        kind = _choices_text(key) if key.choices else key.kind.value
        lines.append(f"| `{key.name}` | {kind} | {shown_default(key)} | {_cell(key.help)} |")
    return "\n".join(lines) + "\n"


def rollout_table() -> str:
    """The toolkit.yaml reference as a Markdown table (docs/rollout.md embeds it)."""
    lines = ["| toolkit.yaml key | env fallback | default | meaning |", "|---|---|---|---|"]
    for key in rollout_keys():
        default = shown_default(key).replace(f"`{key.default_from}`", f"`{key.default_from.lower()}`")
        lines.append(f"| `{key.yaml_key}` | `{key.name}` | {default} | {_cell(key.help)} |")
    return "\n".join(lines) + "\n"


def gateway_table() -> str:
    """The gateway settings as a Markdown table (docs/gateway.md embeds it)."""
    lines = ["| `GatewayConfig` field | toolkit.yaml key / env | default | meaning |", "|---|---|---|---|"]
    for key in gateway_keys():
        source = f"`{key.yaml_key}` / `{key.name}`" if key.rollout else f"slime flag / `{key.name}`"
        lines.append(f"| `{key.gateway}` | {source} | {shown_default(key)} | {_cell(key.help)} |")
    return "\n".join(lines) + "\n"


def family_list() -> str:
    """The renderer families, tool-call and reasoning parsers as Markdown (docs/gateway.md)."""
    return (
        f"- `RENDERER_FAMILY`: {', '.join(f'`{name}`' for name in RENDERER_FAMILIES)}\n"
        f"- `SGLANG_TOOL_CALL_PARSER`: {', '.join(f'`{n}`' for n in (AUTO, *TOOL_CALL_PARSERS, NONE))}\n"
        f"- `SGLANG_REASONING_PARSER`: {', '.join(f'`{n}`' for n in (AUTO, *REASONING_PARSERS, NONE))}\n"
    )


def _python_type(key: Key) -> str:
    types = {Kind.INT: "int", Kind.FLOAT: "float", Kind.BOOL: "bool", Kind.WORDS: "list[str]"}
    base = types.get(key.kind, "str")
    unset = NONE in key.choices or not (key.required or key.default is not None or key.default_from)
    return f"{base} | None" if unset else base


def toolkit_fields() -> str:
    """The fields of ``ToolkitConfig``: one per rollout setting, named :attr:`Key.yaml_key`."""
    return "".join(f"    {key.yaml_key}: {_python_type(key)}\n" for key in rollout_keys())


def gateway_fields() -> str:
    """The settings fields of ``GatewayConfig``: one per gateway setting, with its default."""
    lines = []
    for key in gateway_keys():
        value = parse_text(key, "")
        value = None if value == NONE else value
        default = "" if key.required else f' = "{value}"' if isinstance(value, str) else f" = {value}"
        lines.append(f"    {key.gateway}: {_python_type(key)}{default}\n")
    return "".join(lines)


#: generated blocks (Markdown tables in the docs, fields of the config classes) -> their text
GENERATED = {"env": reference_table, "rollout": rollout_table, "gateway": gateway_table, "names": family_list}
GENERATED |= {"toolkit-fields": toolkit_fields, "gateway-fields": gateway_fields}

_BLOCK = re.compile(  # a marker line naming the command that prints the block, the block, an end line
    r"(?P<head>^[ \t]*(?:<!-- |# )generated: PYTHONPATH=python python3 -m agentcore_slime\.settings"
    r"\.schema (?P<name>[\w-]+) [^\n]*\n).*?(?P<tail>^[ \t]*(?:<!-- |# )end generated[^\n]*\n)",
    re.MULTILINE | re.DOTALL,
)


def regenerate(text: str) -> str:
    """``text`` with each generated block rewritten from the schema (unchanged when up to date).

    :param text: a Markdown or Python file with blocks between marker lines.
    """
    return _BLOCK.sub(lambda block: block["head"] + GENERATED[block["name"]]() + block["tail"], text)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:2] == ["--write"]:
        for path in map(Path, sys.argv[2:]):
            path.write_text(regenerate(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(GENERATED[sys.argv[1] if len(sys.argv) > 1 else "env"](), end="")
