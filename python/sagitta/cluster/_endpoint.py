"""A replica's data-path endpoint: its reads and writes served on a TCP
port of its own node, so that clients (and the shard's primary) call it
directly instead of through Ray's actor calls (docs/CLUSTER.md, "Data
path"). Ray stays the control plane: it hands out each endpoint's address
and token (``Replica.endpoint``).

One thread accepts; each connection gets a thread that reads a request,
runs the named method of the target (one of ``methods``; the target's
own locks order it with the calls Ray makes) and writes the answer, in
order. A malformed frame, a wrong token or a method not served closes or
refuses that connection only; the endpoint itself never stops on input.
A connection must say hello within ``HELLO_TIMEOUT`` seconds, and at most
``MAX_CONNECTIONS`` are served at once (one more is closed at once), so
neither idle sockets nor a flood of them can pile up threads.
"""

from __future__ import annotations

import hmac
import secrets
import socket
import threading
from typing import Any

from . import _wire

# Seconds a new connection has to send its hello (a client sends it at
# once); afterwards a connection may stay idle between calls.
HELLO_TIMEOUT = 10.0
# Connections served at once (clients keep a few per endpoint).
MAX_CONNECTIONS = 1024


class Endpoint:
    def __init__(self, target: Any, methods: frozenset, host: str):
        self.target = target
        self.methods = methods
        self.token = secrets.token_hex(16)
        self._sock = socket.create_server((host, 0), backlog=128)
        self.host, self.port = self._sock.getsockname()[:2]
        self._closed = False
        self._conns: set = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="sagitta-endpoint", daemon=True)
        self._thread.start()

    def address(self) -> dict:
        return {"host": self.host, "port": self.port, "token": self.token}

    def close(self) -> None:
        """Stops accepting and closes every connection (calls in progress
        finish; their answers are not sent)."""
        with self._lock:
            self._closed = True
            conns = list(self._conns)
        for s in [self._sock, *conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                if len(self._conns) >= MAX_CONNECTIONS:
                    conn.close()
                    continue
                self._conns.add(conn)
            threading.Thread(
                target=self._serve, args=(conn,), name="sagitta-endpoint-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(HELLO_TIMEOUT)
            hello = _wire.recv(conn)
            conn.settimeout(None)
            ok = (
                isinstance(hello, dict)
                and hello.get("m") == "hello"
                and isinstance(hello.get("token"), str)
                and hmac.compare_digest(hello["token"], self.token)
            )
            if not ok:
                _wire.send(conn, _wire.error_body(PermissionError("wrong or missing token")))
                return
            _wire.send(conn, {"ok": True})
            while True:
                _wire.send_parts(conn, self._call(_wire.recv(conn)))
        except (OSError, _wire.WireError) as e:
            # The peer went away (or sent a frame that is not one): tell it
            # why when it can still hear, then close this connection only.
            if isinstance(e, _wire.WireError):
                try:
                    _wire.send(conn, _wire.error_body(e))
                except OSError:
                    pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _call(self, req: Any) -> list:
        """The encoded answer to one request."""
        if not (
            isinstance(req, dict)
            and set(req) == {"m", "a", "k"}
            and isinstance(req["a"], list)
            and isinstance(req["k"], dict)
        ):
            return _wire.encode(_wire.error_body(_wire.WireError("a request is {m, a, k}")))
        if req["m"] not in self.methods:
            return _wire.encode(_wire.error_body(ValueError(f"no method {req['m']!r} here")))
        try:
            # Encoded here, so that a value that cannot be sent is an
            # error answer rather than a broken connection.
            return _wire.encode({"ok": getattr(self.target, req["m"])(*req["a"], **req["k"])})
        except Exception as e:
            return _wire.encode(_wire.error_body(e))
