"""Rollout routing replay on the rollout's side: every sample's ``rollout_routed_experts``.

With slime's ``--use-rollout-routing-replay`` Megatron replays, for every token it trains on,
the experts the engine routed that token to while sampling. slime's layout (fa3c990 and
v0.3.1): ``Sample.rollout_routed_experts`` holds one row per token but the last
(``len(tokens) - 1``), each ``num_layers x moe_router_topk`` int32 (``utils/types.py`` reshapes
SGLang's answer so); ``ray/rollout.py`` takes the key into the training data only when the
first sample has it, and ``megatron_utils/actor.py`` (v0.3.1: ``cp_utils.py``) stops the run
without it and asserts ``rows == len(tokens) - 1`` for every sample. So every sample carries
one: an episode's samples the engine's rows, assembled across its calls
(:func:`attach_routing`), and the zero-gradient samples (failed episodes, padding) rows that
train nothing (:func:`fill_routing`; their loss mask is 0).

The gateway keeps each call's rows from the position it asked from (SGLang's
``routed_experts_start_len``: what the session already held) to the call's end. The rows of a
sample are rebuilt by replaying the calls in order, the way slime v0.3.1's ``Sample`` joins a
tail to an existing array: the rows before a call's start are those held, which must cover
them and belong to the same tokens. A sample whose rows cannot be rebuilt exactly (the engine
returned none, or not the rows asked for, or ids outside the model's experts) fails its episode
as an infrastructure failure (``routing_replay``): it never trains with wrong routing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentcore_slime.errors import ConfigError
from agentcore_slime.gateway.routing import row_bytes
from agentcore_slime.gateway.trace import CallTrace
from agentcore_slime.rollout.samples import ShimRecord

#: slime's dtype of routed experts (``decode_int32_meta_array``: ``torch.int32``)
DTYPE = np.int32
#: spot checks of the prefix a call's rows start after (constant cost per call)
PROBES = 16


@dataclass(frozen=True)
class RoutingLayout:
    """The shape slime replays: ``--num-layers`` x ``--moe-router-topk`` ids per token, each
    below ``--num-experts`` (0: unknown, not checked)."""

    layers: int
    topk: int
    experts: int = 0

    @property
    def row_bytes(self) -> int:
        return row_bytes(self.layers, self.topk)


def routing_layout(args: Any) -> RoutingLayout | None:
    """The layout to build, from slime's args; None without ``--use-rollout-routing-replay``.

    :raises ConfigError: the replay is on but the model's shape is not in the args.
    """
    if not getattr(args, "use_rollout_routing_replay", False):
        return None
    values = {name: getattr(args, name, None) for name in ("num_layers", "moe_router_topk", "num_experts")}
    bad = [n for n in ("num_layers", "moe_router_topk") if not _positive(values[n])]
    if bad or not (values["num_experts"] is None or _positive(values["num_experts"])):
        raise ConfigError(
            f"use_rollout_routing_replay: needs an MoE model's --num-layers, --moe-router-topk and "
            f"--num-experts, got {values}",
            "use a model script of a mixture-of-experts model, or remove --use-rollout-routing-replay",
        )
    layers, topk, experts = (int(values[n] or 0) for n in ("num_layers", "moe_router_topk", "num_experts"))
    return RoutingLayout(layers, topk, experts)


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class _Held:
    """The rows a session holds after each call, rebuilt in call order (rows of positions
    ``[0, count)`` of the last call's prompt + completion)."""

    def __init__(self, layout: RoutingLayout) -> None:
        self.layout = layout
        self.rows = bytearray()
        self.count = 0
        self.prompt: list[int] = []
        self.completion: list[int] = []
        self.problem = ""  # why the last call left fewer rows than its positions

    def add(self, trace: CallTrace) -> None:
        start, data, size = trace.routed_experts_start, trace.routed_experts, self.layout.row_bytes
        prompt = trace.prompt_token_ids
        positions = len(prompt) + len(trace.completion_token_ids) - 1
        if start is None:
            self.problem = "the gateway did not ask the engine for routed experts"
        elif data is None:
            self.problem = trace.routed_experts_problem or "the engine returned no routed experts"
        elif start > self.count or not self._probed(prompt, start):
            held = self._shared(prompt, self.count)
            self.problem = f"the call's rows start at {start}, past the {held} held for its prompt"
        elif len(data) % size or start + len(data) // size != positions:
            self.problem = f"{len(data)} bytes of rows from {start}: not the rows of {positions} positions"
        else:
            del self.rows[start * size :]
            self.rows += data
            self._advance(trace, positions, "")
            return
        self._advance(trace, self._shared(prompt, self.count), self.problem)

    def _advance(self, trace: CallTrace, held: int, problem: str) -> None:
        """After a call: the rows of its first ``held`` positions are held."""
        del self.rows[held * self.layout.row_bytes :]
        self.count, self.problem = held, problem
        self.prompt, self.completion = trace.prompt_token_ids, trace.completion_token_ids

    def _probed(self, prompt: list[int], n: int) -> bool:
        """Whether the first ``n`` ids of ``prompt`` are the last call's, checked at its last one and
        :data:`PROBES` spread over the rest (the gateway compared them all when it chose the call's
        start, so the cost per call stays constant; the merge's spot checks do the same)."""
        if n == 0:
            return True
        step = max(1, n // PROBES)
        return all(self._same_at(prompt, i) for i in (*range(0, n, step), n - 1))

    def _same_at(self, prompt: list[int], i: int) -> bool:
        before = len(self.prompt)
        previous = self.prompt[i] if i < before else self.completion[i - before]
        return prompt[i] == previous

    def _shared(self, prompt: list[int], limit: int) -> int:
        """How many of the first ``limit`` ids of ``prompt`` equal the last call's prompt +
        completion (slice compares in C; a binary search when they differ)."""
        if self._same(prompt, limit):
            return limit
        low, high = 0, limit - 1
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self._same(prompt, mid) else (low, mid - 1)
        return low

    def _same(self, prompt: list[int], n: int) -> bool:
        before = len(self.prompt)
        if n <= before:
            return prompt[:n] == self.prompt[:n]
        return prompt[:before] == self.prompt and prompt[before:n] == self.completion[: n - before]

    def array(self, rows: int) -> np.ndarray | str:
        """The held rows as slime's array (a copy), or why they are not the ``rows`` wanted."""
        if self.count != rows:
            return self.problem or f"{self.count} rows held for {rows} positions"
        shape = (rows, self.layout.layers, self.layout.topk)
        out = np.frombuffer(self.rows, dtype=DTYPE, count=rows * self.layout.layers * self.layout.topk)
        out = out.reshape(shape).copy()  # the view is dropped here: the bytearray stays resizable
        experts = self.layout.experts
        if experts and out.size and (int(out.min()) < 0 or int(out.max()) >= experts):
            return f"routed expert ids {int(out.min())}..{int(out.max())} are outside 0..{experts - 1}"
        return out


def attach_routing(traces: Sequence[CallTrace], samples: list[Any], layout: RoutingLayout) -> str | None:
    """Give each of an episode's samples its ``rollout_routed_experts``.

    :param traces: the episode's calls in call order.
    :param samples: the samples the merge built from them (each names its calls in its
        :class:`~agentcore_slime.rollout.samples.ShimRecord`; the last one's prompt +
        completion are the sample's tokens).
    :param layout: the shape slime replays.
    :returns: None, or why a sample's rows cannot be rebuilt (then none is trusted).
    """
    ends = {ShimRecord.of(sample).calls[-1]: sample for sample in samples if ShimRecord.of(sample).calls}
    if len(ends) != len(samples):
        return "a sample does not name the calls it was built from"
    held, found = _Held(layout), []
    for index, trace in enumerate(traces):
        held.add(trace)
        sample = ends.get(index)
        if sample is None:
            continue
        rows = held.array(len(sample.tokens) - 1)
        if isinstance(rows, str):
            return f"call {index + 1} of {len(traces)}: {rows}"
        found.append((sample, rows))
    for sample, rows in found:  # all or none
        sample.rollout_routed_experts = rows
    return None


def filler(rows: int, layout: RoutingLayout) -> np.ndarray:
    """Rows for a sample that trains nothing: distinct valid expert ids per layer, as slime pads
    the last token's row (``actor.py`` ``pad_func``: ``arange % num_experts``)."""
    modulus = layout.experts or layout.topk
    values = np.arange(rows * layout.layers * layout.topk, dtype=np.int64) % modulus
    return values.astype(DTYPE).reshape(rows, layout.layers, layout.topk)


def fill_routing(groups: list[list[Any]], layout: RoutingLayout) -> int:
    """Give every sample without rows (failed episodes, padding) :func:`filler` rows, and check
    that each sample's rows are slime's layout for its tokens.

    :returns: how many samples got filler rows.
    :raises RuntimeError: a sample's rows do not fit its tokens (a bug: slime would stop the run).
    """
    filled = 0
    for sample in (s for group in groups for s in group):
        wanted = (len(sample.tokens) - 1, layout.layers, layout.topk)
        if sample.rollout_routed_experts is None:
            sample.rollout_routed_experts = filler(wanted[0], layout)
            filled += 1
        rows = sample.rollout_routed_experts
        if not isinstance(rows, np.ndarray) or rows.shape != wanted or rows.dtype != DTYPE:
            shape = getattr(rows, "shape", rows)
            raise RuntimeError(f"rollout_routed_experts {shape!r} is not {wanted} int32")
    return filled
