"""Session ids in log lines: shortened, never whole.

A live gateway session id is the only credential on the gateway's agent routes: whoever holds
it (or the session's base URL ``{gateway}/sessions/{id}/v1``) can call the policy through that
session. Logs travel further than the run directory (terminals, pasted output, CI logs), so a
log line names a session by the first :data:`SHOWN` characters of its id (enough to find the
episode in the run's records, which keep the full id and only the run's owner reads), and text
that quotes the full id or URL (an agent's error message, say) is shortened the same way.
"""

from __future__ import annotations

#: characters of a session id a log line shows (32 bits of a uuid4: a name, not a key)
SHOWN = 8


def short_id(session_id: str) -> str:
    """``session_id`` as a log line shows it.

    :param session_id: a session id.
    """
    return session_id if len(session_id) <= SHOWN else session_id[:SHOWN] + ".."


def redact(text: object, session_id: str) -> str:
    """``text`` (a reason, an exception) with every whole ``session_id`` in it shortened.

    :param text: what the log line quotes.
    :param session_id: the episode's session id.
    """
    text = str(text)
    return text.replace(session_id, short_id(session_id)) if session_id else text
