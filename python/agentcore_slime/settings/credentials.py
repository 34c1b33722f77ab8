"""Refuse secrets in pass-through flags (EXTRA_FLAGS and the flags after ``--``).

Pass-through flags are written into ``runs/<EXP_ID>/train.sh`` (its header and its
EXTRA_ARGS), ``runs/<EXP_ID>/env`` and the ``ray job submit`` argv, where every user of the
node can read them. A secret must come from the environment instead, exactly like a secret
in the env file (:func:`.schema.is_secret`).

A flag counts as a secret by the words of its name (split at ``-`` and ``_``):

- ``secret``, ``password``, ``passwd``, ``passphrase``, ``credential(s)``, ``apikey`` anywhere;
- ``token`` as the last word (``--hf-token``, ``--aws-session-token``; not
  ``--rollout-stop-token-ids``, whose value is token ids);
- ``key`` anywhere (``--wandb-key``, ``--sglang-api-key``, ``--aws-access-key-id``), except
  slime's ``--<field>-key`` flags that name a field of the data rows (``--input-key``,
  ``--eval-label-key``, ...).

AWS credentials (``--aws-access-key-id``, ``--aws-secret-access-key``, ``--aws-session-token``)
are covered by these words; the message points to their environment variables.
"""

from __future__ import annotations

import re

from .errors import ConfigError

_SECRET_WORDS = frozenset(
    {"secret", "secrets", "password", "passwd", "passphrase", "credential", "credentials", "apikey"}
)
#: ``--<field>-key`` flags of slime that name a JSON field of the data, not a credential
_DATA_FIELDS = frozenset({"input", "label", "tool", "metadata", "reward"})
_EXPORTS = {
    "wandb": "export WANDB_API_KEY=... (and WANDB_ENTITY) in the shell that runs bin/train instead: "
    "wandb is turned on when WANDB_API_KEY is set and reads it from the environment",
    "aws": "export AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (or AWS_PROFILE) in "
    "the shell that runs bin/train instead: Ray workers inherit them",
}
_EXPORT_ANY = (
    "remove the flag and export the secret as an environment variable in the shell that runs "
    "bin/train instead: Ray workers inherit it"
)


def secret_flag(word: str) -> bool:
    """Whether ``word`` is a flag (``--name`` or ``--name=value``) whose name says it carries a secret.

    :param word: one pass-through word.
    """
    if not word.startswith("-"):
        return False
    name = word.lstrip("-").partition("=")[0].lower()
    words = [part for part in re.split(r"[-_.]", name) if part]
    if not words:
        return False
    if _SECRET_WORDS.intersection(words) or words[-1] == "token":
        return True
    for at, part in enumerate(words):
        is_data_field = at == len(words) - 1 and at > 0 and words[at - 1] in _DATA_FIELDS
        if part == "key" and not is_data_field:
            return True
    return False


def refuse_secret_flags(words: list[str]) -> None:
    """Refuse the first pass-through flag that carries a secret; its value is never shown.

    :param words: the pass-through flags, in order.
    :raises ConfigError: naming the flag and the environment variable to export instead.
    """
    for word in words:
        if secret_flag(word):
            flag = word.partition("=")[0]
            name = flag.lstrip("-").lower()
            how = next((text for prefix, text in _EXPORTS.items() if name.startswith(prefix)), _EXPORT_ANY)
            raise ConfigError(
                f"{flag} in EXTRA_FLAGS or after -- would put a secret into train.sh, "
                "runs/<EXP_ID>/env and the job's command line",
                how,
            )
