"""Agent episodes: the wire contract, transports (ACR, local URL), the S3 result watcher, the runner.

- :mod:`.wire`: payload, result key, reply and result parsing, reward extraction, errors.
- :mod:`.pacing`: the TPS limiter shared by invocations and stops.
- :mod:`.transports`: start and stop an agent (boto3 ``bedrock-agentcore`` or HTTP).
- :mod:`.results`: find result objects with one S3 LIST per poll cycle.
- :mod:`.runner`: one episode end to end, and its failure classification.
"""

from __future__ import annotations

from agentcore_slime.episodes.pacing import RateLimiter
from agentcore_slime.episodes.results import ResultWatcher
from agentcore_slime.episodes.runner import (
    FAILURE_REASONS,
    EpisodeOutcome,
    EpisodeRequest,
    EpisodeRunner,
    boto_config,
    make_runner,
)
from agentcore_slime.episodes.transports import AcrTransport, LocalTransport, Transport
from agentcore_slime.episodes.wire import (
    AmbiguousInvokeError,
    InvokeError,
    build_payload,
    extract_reward,
    new_session_id,
    result_key,
)

__all__ = [
    "FAILURE_REASONS",
    "AcrTransport",
    "AmbiguousInvokeError",
    "EpisodeOutcome",
    "EpisodeRequest",
    "EpisodeRunner",
    "InvokeError",
    "LocalTransport",
    "RateLimiter",
    "ResultWatcher",
    "Transport",
    "boto_config",
    "build_payload",
    "extract_reward",
    "make_runner",
    "new_session_id",
    "result_key",
]
