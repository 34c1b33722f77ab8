"""Log lines name a session by a shortened id, never the whole (a live gateway credential)."""

from __future__ import annotations

import uuid

from agentcore_slime.episodes.log_ids import SHOWN, redact, short_id
from hypothesis import given
from hypothesis import strategies as st


def test_a_session_url_in_an_agents_error_is_shortened() -> None:
    sid = str(uuid.uuid4())
    error = f"ConnectError for url 'http://10.0.0.5:8000/sessions/{sid}/v1/chat/completions' (twice: {sid})"
    said = redact(error, sid)
    assert sid not in said
    assert said.count(f"/sessions/{sid[:SHOWN]}../v1/") == 1 and said.endswith(f"(twice: {sid[:SHOWN]}..)")


@given(st.uuids(version=4), st.text(max_size=40), st.text(max_size=40))
def test_no_whole_id_survives_the_text_around_it_does(sid_value: uuid.UUID, before: str, after: str) -> None:
    sid = str(sid_value)
    said = redact(before + sid + after, sid)
    assert sid not in said
    assert said.startswith(before) or sid in before  # text around the id is kept
    assert short_id(sid) == sid[:SHOWN] + ".." and short_id("abc") == "abc"
