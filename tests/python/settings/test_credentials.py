"""Secrets in pass-through flags (issue 18, defect 12): which flag names carry a secret, and
the refusal, which names the flag and never shows its value."""

from __future__ import annotations

import pytest
from agentcore_slime.settings.credentials import refuse_secret_flags, secret_flag
from agentcore_slime.settings.errors import ConfigError
from agentcore_slime.settings.validate import check_slime_flags

SECRET_FLAGS = [
    "--wandb-key",
    "--wandb-key=sk-1",
    "--wandb-api-key",
    "--sglang-api-key",
    "--api_key",
    "--apikey",
    "--hf-token",
    "--hub-token=x",
    "--aws-access-key-id",
    "--aws-secret-access-key",
    "--aws-session-token",
    "--db-password",
    "--client-secret",
    "--gcp-credentials",
    "--private-key-file",
    "--WANDB-KEY",
]
#: every slime flag at fa3c990 whose name has key or token in it but is not a secret (from
#: `git grep` of its argparse definitions), and Megatron/SGLang look-alikes
NOT_SECRET = [
    "--input-key",
    "--label-key",
    "--tool-key",
    "--metadata-key",
    "--reward-key",
    "--eval-input-key",
    "--eval-label-key",
    "--eval-tool-key",
    "--eval-reward-key",
    "--multimodal-keys",
    "--rollout-stop-token-ids",
    "--rollout-skip-special-tokens",
    "--max-tokens-per-gpu",
    "--log-probs-max-tokens-per-gpu",
    "--calculate-per-token-loss",
    "--eval-min-new-tokens",
    "--tokenizer-type",
    "--sglang-skip-tokenizer-init",
    "--aws-region",
    "key",  # a value, not a flag
    "sk-secret-token",  # a value, not a flag
]


@pytest.mark.parametrize("word", SECRET_FLAGS)
def test_secret_flags_are_recognised(word: str) -> None:
    assert secret_flag(word)


@pytest.mark.parametrize("word", NOT_SECRET)
def test_data_and_token_id_flags_are_not_secrets(word: str) -> None:
    assert not secret_flag(word)


@pytest.mark.parametrize(
    ("words", "how"),
    [
        (["--rollout-top-k", "5", "--wandb-key", "sk-Zq8W7"], "export WANDB_API_KEY=..."),
        (["--wandb-key=sk-Zq8W7"], "export WANDB_API_KEY=..."),
        (["--aws-secret-access-key", "sk-Zq8W7"], "export AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"),
        (["--sglang-api-key", "sk-Zq8W7"], "remove the flag and export the secret as an environment"),
    ],
)
def test_the_refusal_says_what_to_export_and_never_shows_the_value(words: list[str], how: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_slime_flags(words)
    assert "would put a secret into train.sh" in caught.value.what
    assert how in caught.value.how
    assert "sk-Zq8W7" not in str(caught.value)


def test_flags_without_secrets_pass() -> None:
    refuse_secret_flags(["--input-key", "question", "--rollout-stop-token-ids", "1", "2", "--lr", "1e-6"])
