"""Checks that relate settings to each other or to outside rules (S3, ARNs), shared by
``bin/train``'s validation and the rollout's :func:`~agentcore_slime.settings.config.load_config`.

Standard library only. Each check raises a :class:`~agentcore_slime.errors.ConfigError` that
says what is wrong and how to fix it.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlparse

from agentcore_slime.errors import ConfigError

_EXP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_ARN = re.compile(
    r"arn:aws(-[a-z]+)*:bedrock-agentcore:[a-z]{2}(-[a-z]+)+-\d:\d{12}:runtime/[A-Za-z0-9][A-Za-z0-9_-]*"
)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def check_exp_id(exp_id: str) -> None:
    """EXP_ID names runs/<EXP_ID>/ and is the first part of every result key."""
    if not _EXP_ID.fullmatch(exp_id) or ".." in exp_id:
        raise ConfigError(
            f"EXP_ID={exp_id!r} is not safe as a directory name and S3 key prefix",
            "use letters, digits, '.', '_' and '-' (at most 100, starting with a letter or digit)",
        )


def check_bucket(bucket: str) -> None:
    """S3's bucket naming rules."""
    problem = None
    if not _BUCKET.fullmatch(bucket):
        problem = (
            "must be 3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit"
        )
    elif ".." in bucket or ".-" in bucket or "-." in bucket:
        problem = "must not contain '..', '.-' or '-.'"
    elif bucket.startswith(_BUCKET_PREFIXES) or bucket.endswith(_BUCKET_SUFFIXES):
        problem = "uses a prefix or suffix S3 reserves"
    else:
        try:
            ipaddress.IPv4Address(bucket)
            problem = "must not look like an IP address"
        except ValueError:
            pass
    if problem:
        raise ConfigError(f"S3_BUCKET={bucket!r} is not a valid S3 bucket name", f"a bucket name {problem}")


def check_agent(arn: object, url: object) -> None:
    """Exactly one of AGENT_RUNTIME_ARN and AGENT_URL, each well formed."""
    if (arn is None) == (url is None):
        raise ConfigError(
            "set exactly one of AGENT_RUNTIME_ARN and AGENT_URL" + (" (both are set)" if arn else ""),
            "AGENT_RUNTIME_ARN for the agent deployed on ACR, AGENT_URL for a local agent container",
        )
    if arn is not None and not _ARN.fullmatch(str(arn)):
        raise ConfigError(
            f"AGENT_RUNTIME_ARN={arn!r} is not an AgentCore runtime ARN",
            "copy it from the deployment: arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>",
        )
    if url is not None:
        parsed = urlparse(str(url))
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(
                f"AGENT_URL={url!r} is not an http(s) URL", "e.g. AGENT_URL=http://127.0.0.1:8080"
            )
        root, ending = str(url).rstrip("/"), "/invocations"
        if root.endswith(ending):  # the local transport posts to <AGENT_URL>/invocations itself
            raise ConfigError(
                f"AGENT_URL={url!r} ends in {ending}: every episode would post to {ending}{ending}",
                f"name the agent's root, without {ending}: AGENT_URL={root.removesuffix(ending)}",
            )


#: why --log-passrate is refused, and what to do instead (bin/train and the rollout say the same)
LOG_PASSRATE_HOW = (
    "slime's train actor then needs exactly rollout_batch_size x n_samples_per_prompt samples, "
    "and a multi-turn episode or the data-parallel padding adds more; remove --log-passrate "
    "(the eval reward per dataset, eval/<name>, is logged without it)"
)


def check_global_batch_divides(global_batch: int, episodes: int) -> None:
    """A ``--global-batch-size`` must divide the rollout's episodes.

    slime makes ``episodes // global_batch`` optimizer steps per rollout; with a remainder the
    rollout's padding fills the last step, which is still averaged over the full batch.

    :param global_batch: the ``--global-batch-size`` given.
    :param episodes: rollout_batch_size x n_samples_per_prompt.
    """
    if global_batch < 1 or episodes % global_batch:
        raise ConfigError(
            f"--global-batch-size {global_batch} does not divide the rollout's {episodes} episodes "
            "(ROLLOUT_BATCH_SIZE x N_SAMPLES_PER_PROMPT)",
            f"remove it (bin/train sets one optimizer step per rollout) or pass a divisor of {episodes}",
        )
