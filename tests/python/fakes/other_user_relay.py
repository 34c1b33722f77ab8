"""The other user's relay: a second local user (other_user.py, a real uid) who took ports on
127.0.0.1 before a run, answers 200 to anything sent there and keeps every byte she got. The
tests of issue 43 hold that nothing of a run's (a key, an admin secret, a session id) reaches her.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from other_user import OtherUser

#: the other user's relay: listens on 127.0.0.1 at each port given, appends every byte any
#: client sends to the log file (one JSON line per connection), answers 200 to anything
RELAY = r"""
import json, socket, sys, threading
log, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
lock = threading.Lock()
def serve(conn):
    data = b""
    conn.settimeout(2)
    try:
        while chunk := conn.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data:
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
    except OSError:
        pass
    with lock, open(log, "a") as out:
        out.write(json.dumps(data.decode("latin-1")) + "\n")
    conn.close()
listeners = []
for port in ports:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen(64)
    listeners.append(s)
print("listening", flush=True)
def accept(s):
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
for s in listeners:
    threading.Thread(target=accept, args=(s,), daemon=True).start()
threading.Event().wait()
"""


class Relay:
    """The other user's relay on 127.0.0.1 at ``ports``; :meth:`seen` is every byte it got."""

    def __init__(self, user: OtherUser, ports: list[int]) -> None:
        self.log = Path(user.home) / "relay.log"
        self.proc = user.popen(
            [sys.executable, "-c", RELAY, str(self.log), *map(str, ports)],
            stdout=-1,  # subprocess.PIPE
            stderr=-1,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == b"listening", self.proc.stderr.read() if self.proc.stderr else line

    def seen(self) -> str:
        time.sleep(0.5)  # a connection still open writes its bytes when its 2 s read ends
        return self.log.read_text() if self.log.exists() else ""

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
