"""The trace log: every model call of a step as one JSON line in ``$TRACE_LOG`` (when set)."""

from __future__ import annotations

import json
import os

from agentcore_slime.rollout.episode import _Result
from agentcore_slime.rollout.runtime import Runtime
from agentcore_slime.rollout.samples import ShimRecord


def _trace_records(rollout_id: int, kind: str, results: list[_Result]) -> list[str]:
    lines = []
    for result in results:
        records = [ShimRecord.of(s) for s in result.samples]
        segment_of = {call: record.segment for record in records for call in record.calls}
        for number, trace in enumerate(result.traces):
            record = {
                "rollout_id": rollout_id,
                "kind": kind,
                "session_id": result.episode.session_id,
                "group_index": result.episode.template.group_index,
                "index": result.episode.template.index,
                "call": number,
                "segment": segment_of.get(number),
                "token_mode": trace.token_mode,
                "prompt_tokens": len(trace.prompt_token_ids),
                "completion_tokens": len(trace.completion_token_ids),
                "finish_reason": trace.finish_reason,
                "reward": result.reward,
                "failure": result.reason,
                "messages": trace.messages,
                "response_message": trace.response_message,
            }
            lines.append(json.dumps(record, default=str) + "\n")
    return lines


def _append_trace_log(path: str, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.writelines(lines)


async def _write_trace_log(runtime: Runtime, rollout_id: int, kind: str, results: list[_Result]) -> None:
    path = os.environ.get("TRACE_LOG")
    if path:
        await runtime.call(_append_trace_log, path, _trace_records(rollout_id, kind, results))
