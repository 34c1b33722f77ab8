"""Episode-level reward normalisation: worked examples and hypothesis properties."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace
from typing import Any

import pytest
from agentcore_slime.rollout.rewards import group_normalize, normalize_episode_rewards
from agentcore_slime.rollout.samples import KIND_EPISODE, KIND_PADDING
from hypothesis import given, settings
from hypothesis import strategies as st
from slime.utils.types import Sample


def args(**kw: Any) -> SimpleNamespace:
    values = {"reward_postprocessing": "grpo", "grpo_std_normalization": True, "reward_key": None}
    values.update(kw)
    return SimpleNamespace(**values)


def sample(group: int, session: str, reward: Any, kind: str = KIND_EPISODE) -> Sample:
    return Sample(
        group_index=group,
        session_id=session,
        reward=reward,
        metadata={"agentcore": {"kind": kind, "session_id": session}},
    )


def test_grpo_matches_slime_formula_for_single_segment_episodes() -> None:
    samples = [sample(0, f"s{i}", r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    raw, normalized = normalize_episode_rewards(args(), samples)
    std = statistics.stdev([1.0, 0.0, 0.0, 1.0])
    assert raw == [1.0, 0.0, 0.0, 1.0]
    assert normalized == pytest.approx([(r - 0.5) / (std + 1e-6) for r in raw])
    assert all(isinstance(x, float) for x in raw + normalized)


def test_multi_segment_episode_counts_once() -> None:
    samples = [sample(0, "a", 1.0), sample(0, "a", 1.0), sample(0, "a", 1.0), sample(0, "b", 0.0)]
    _, normalized = normalize_episode_rewards(args(), samples)
    expected = 0.5 / (statistics.stdev([1.0, 0.0]) + 1e-6)
    assert normalized == pytest.approx([expected, expected, expected, -expected])


def test_groups_are_normalised_separately_not_by_position() -> None:
    samples = [sample(1, "a", 2.0), sample(0, "b", 1.0), sample(1, "c", 0.0), sample(0, "d", 1.0)]
    _, normalized = normalize_episode_rewards(args(grpo_std_normalization=False), samples)
    assert normalized == [1.0, 0.0, -1.0, 0.0]


def test_singleton_groups_and_equal_rewards_give_zero() -> None:
    samples = [sample(0, "a", 1.0), sample(1, "b", 0.7), sample(1, "c", 0.7)]
    _, normalized = normalize_episode_rewards(args(), samples)
    assert normalized == [0.0, 0.0, 0.0]


def test_identity_and_padding() -> None:
    samples = [sample(0, "a", 0.25), sample(0, "b", 1.0), sample(0, None, 0.0, kind=KIND_PADDING)]
    raw, normalized = normalize_episode_rewards(args(reward_postprocessing="identity"), samples)
    assert raw == normalized == [0.25, 1.0, 0.0]


def test_padding_does_not_join_the_group() -> None:
    samples = [sample(0, "a", 1.0), sample(0, "b", 0.0), sample(0, None, 0.0, kind=KIND_PADDING)]
    _, normalized = normalize_episode_rewards(args(grpo_std_normalization=False), samples)
    assert normalized == [0.5, -0.5, 0.0]


def test_reward_key_and_bad_rewards() -> None:
    samples = [sample(0, "a", {"acc": 1.0}), sample(0, "b", {"acc": 0.0})]
    raw, _ = normalize_episode_rewards(args(reward_key="acc"), samples)
    assert raw == [1.0, 0.0]
    with pytest.raises(ValueError, match="sample 0 .* has reward None"):
        normalize_episode_rewards(args(), [sample(0, "a", None)])
    with pytest.raises(ValueError, match="reward_postprocessing: 'ppo'"):
        normalize_episode_rewards(args(reward_postprocessing="ppo"), [sample(0, "a", 1.0)])


def test_mode_falls_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWARD_POSTPROCESSING", "identity")
    _, normalized = normalize_episode_rewards(args(reward_postprocessing=None), [sample(0, "a", 3.0)])
    assert normalized == [3.0]


@st.composite
def steps(draw: st.DrawFn) -> list[Sample]:
    samples = []
    for group in range(draw(st.integers(1, 4))):
        for episode in range(draw(st.integers(1, 5))):
            reward = draw(st.floats(min_value=-5, max_value=5, allow_nan=False))
            samples += [sample(group, f"g{group}e{episode}", reward) for _ in range(draw(st.integers(1, 4)))]
        samples += [sample(group, None, 0.0, kind=KIND_PADDING) for _ in range(draw(st.integers(0, 2)))]
    order = draw(st.permutations(range(len(samples))))
    return [samples[i] for i in order]


@settings(max_examples=200, deadline=None)
@given(steps(), st.booleans())
def test_each_group_sums_to_zero_and_each_episode_counts_once(samples: list[Sample], std: bool) -> None:
    raw, normalized = normalize_episode_rewards(args(grpo_std_normalization=std), samples)
    assert len(raw) == len(normalized) == len(samples)
    episodes: dict[tuple[int, str], set[float]] = {}
    for s, value in zip(samples, normalized, strict=True):
        if s.session_id is None:
            assert value == 0.0
            continue
        episodes.setdefault((s.group_index, s.session_id), set()).add(value)
    assert all(len(values) == 1 for values in episodes.values())
    groups: dict[int, list[float]] = {}
    for (group, _), values in episodes.items():
        groups.setdefault(group, []).append(next(iter(values)))
    for group, values in groups.items():
        scale = max(1.0, max(abs(v) for v in values))
        assert math.fsum(values) == pytest.approx(0.0, abs=1e-6 * scale * len(values))
        raws = [s.reward for s in samples if s.group_index == group and s.session_id is not None]
        if len(values) == 1 or len({*raws}) == 1:
            assert values == [0.0] * len(values)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-10, max_value=10, allow_nan=False), min_size=2, max_size=16))
def test_group_normalize_is_slimes_formula(values: list[float]) -> None:
    mean = statistics.fmean(values)
    std = statistics.stdev(values)
    got = group_normalize(values, std_normalization=True)
    if std == 0.0:
        assert got == [0.0] * len(values)
    else:
        assert got == pytest.approx([(v - mean) / (std + 1e-6) for v in values], rel=1e-9, abs=1e-9)


ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo")


@settings(max_examples=60, deadline=None)
@given(
    estimator=st.sampled_from(ESTIMATORS),
    rewards_normalization=st.booleans(),
    std_normalization=st.booleans(),
    n=st.integers(1, 5),
    segments=st.lists(st.integers(1, 3), min_size=1, max_size=15),
    data=st.data(),
)
def test_hook_computes_slimes_post_process_rewards_per_episode(
    estimator: str,
    rewards_normalization: bool,
    std_normalization: bool,
    n: int,
    segments: list[int],
    data: Any,
) -> None:
    """For every --advantage-estimator and normalization switch, each episode gets what slime's
    ``_post_process_rewards`` (fa3c990; the stand-in restates it) gives that episode when every
    episode is one sample; all segments of a multi-segment episode carry that value."""
    from slime.ray.rollout import _post_process_rewards

    batch = max(1, len(segments) // n)
    values = st.sampled_from([0.0, 0.5, 1.0, -2.0])
    rewards = data.draw(st.lists(values, min_size=batch * n, max_size=batch * n))
    hook_args = args(
        advantage_estimator=estimator,
        rewards_normalization=rewards_normalization,
        grpo_std_normalization=std_normalization and n > 1,  # slime forces it off for n = 1
        n_samples_per_prompt=n,
        rollout_batch_size=batch,
    )
    _, expected = _post_process_rewards(
        hook_args, [sample(i // n, f"s{i}", r) for i, r in enumerate(rewards)]
    )
    split = [
        sample(i // n, f"s{i}", r) for i, r in enumerate(rewards) for _ in range(segments[i % len(segments)])
    ]
    raw, normalized = normalize_episode_rewards(hook_args, split)
    by_session = {s.session_id: value for s, value in zip(split, normalized, strict=True)}
    assert raw == [s.reward for s in split]
    for i, value in enumerate(expected):
        assert by_session[f"s{i}"] == pytest.approx(value, abs=1e-9)


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("rewards_normalization", [True, False])
@pytest.mark.parametrize("std_normalization", [True, False])
def test_each_estimator_against_the_standin(
    estimator: str, rewards_normalization: bool, std_normalization: bool
) -> None:
    """Worked example per estimator: two groups of three episodes, the second episode in two segments."""
    from slime.ray.rollout import _post_process_rewards

    hook_args = args(
        advantage_estimator=estimator,
        rewards_normalization=rewards_normalization,
        grpo_std_normalization=std_normalization,
        n_samples_per_prompt=3,
        rollout_batch_size=2,
    )
    rewards = [1.0, 0.0, 0.5, -1.0, 2.0, 2.0]
    _, expected = _post_process_rewards(
        hook_args, [sample(i // 3, f"s{i}", r) for i, r in enumerate(rewards)]
    )
    split = [sample(i // 3, f"s{i}", r) for i, r in enumerate(rewards) for _ in range(2 if i == 1 else 1)]
    _, normalized = normalize_episode_rewards(hook_args, split)
    assert normalized == pytest.approx(expected[:2] + expected[1:], abs=1e-12)
    centred = estimator in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline") and rewards_normalization
    assert (normalized == [s.reward for s in split]) is not centred


def test_identity_ignores_the_estimator() -> None:
    hook_args = args(reward_postprocessing="identity", advantage_estimator="grpo")
    _, normalized = normalize_episode_rewards(hook_args, [sample(0, "a", 1.0), sample(0, "b", 0.0)])
    assert normalized == [1.0, 0.0]
