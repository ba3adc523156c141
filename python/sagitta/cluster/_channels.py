"""Connections from a client (or a primary) to replicas' data-path
endpoints (``_endpoint.Endpoint``), kept open and reused between calls.

A call is two steps, so that one caller can have a request in flight on
every shard at once from one thread: :meth:`Channels.start` takes an idle
connection to the endpoint (or opens one, with the token) and sends the
request; :meth:`Call.finish` waits for the answer until a deadline and
gives the connection back. A connection that failed, timed out or was
abandoned mid-call is closed, never reused (its answer stream would be
out of step). Thread-safe.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from . import _wire

# Seconds allowed to connect to an endpoint (a live one on a reachable
# node accepts in well under a millisecond).
CONNECT_TIMEOUT = 2.0
# Idle connections kept per endpoint.
IDLE_PER_ENDPOINT = 8


def _key(ep: dict) -> tuple:
    return (ep["host"], ep["port"])


class Call:
    """One request in flight on one connection."""

    def __init__(self, channels: Channels, ep: dict, sock: socket.socket):
        self._channels = channels
        self.ep = ep
        self.sock = sock
        self._done = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def finish(self, deadline: float) -> Any:
        """The answer (or the replica's error, raised as its own type).
        :class:`_wire.CallTimeout` when none came by ``deadline``
        (``time.monotonic()``), :class:`_wire.ReplicaLost` when the
        connection failed."""
        self._done = True
        try:
            self.sock.settimeout(max(1e-3, deadline - time.monotonic()))
            body = _wire.recv(self.sock)
        except TimeoutError:  # socket.timeout is TimeoutError
            self._channels._discard(self.sock)
            raise _wire.CallTimeout(
                f"{self.ep['host']}:{self.ep['port']}: no answer by the deadline"
            ) from None
        except (OSError, _wire.WireError) as e:
            self._channels._discard(self.sock)
            raise _wire.ReplicaLost(f"{self.ep['host']}:{self.ep['port']}: {e}") from None
        if not isinstance(body, dict) or not ({"ok"} == set(body) or {"e"} == set(body)):
            self._channels._discard(self.sock)
            raise _wire.ReplicaLost(f"{self.ep['host']}:{self.ep['port']}: not an answer")
        self._channels._give(self.ep, self.sock)
        if "e" in body:
            name, message = body["e"]
            _wire.raise_error(str(name), str(message))
        return body["ok"]

    def abandon(self) -> None:
        """Drops a call whose answer is no longer wanted (its connection
        is closed)."""
        if not self._done:
            self._done = True
            self._channels._discard(self.sock)


class Channels:
    def __init__(self) -> None:
        self._idle: dict = {}
        self._lock = threading.Lock()
        self.opened = 0

    def start(self, ep: dict, method: str, args: tuple, kwargs: dict, deadline: float) -> Call:
        """Sends ``method(*args, **kwargs)`` to the endpoint ``ep`` (its
        ``host``, ``port`` and ``token``). :class:`_wire.ReplicaLost` when
        it cannot be reached."""
        parts = _wire.encode({"m": method, "a": list(args), "k": kwargs})
        sock = self._take(ep)
        if sock is not None:
            try:
                return self._send(ep, sock, parts, deadline)
            except OSError:
                self._discard(sock)  # the replica closed it meanwhile: open a new one
        sock = self._open(ep, deadline)
        try:
            return self._send(ep, sock, parts, deadline)
        except OSError as e:
            self._discard(sock)
            raise _wire.ReplicaLost(f"{ep['host']}:{ep['port']}: {e}") from None

    def _send(self, ep: dict, sock: socket.socket, parts: list, deadline: float) -> Call:
        sock.settimeout(max(1e-3, deadline - time.monotonic()))
        _wire.send_parts(sock, parts)
        return Call(self, ep, sock)

    def call(self, ep: dict, method: str, args: tuple, kwargs: dict, deadline: float) -> Any:
        return self.start(ep, method, args, kwargs, deadline).finish(deadline)

    def close(self) -> None:
        with self._lock:
            socks = [s for v in self._idle.values() for s in v]
            self._idle.clear()
        for s in socks:
            s.close()

    def _open(self, ep: dict, deadline: float) -> socket.socket:
        left = max(1e-3, min(CONNECT_TIMEOUT, deadline - time.monotonic()))
        try:
            sock = socket.create_connection((ep["host"], ep["port"]), timeout=left)
        except OSError as e:
            raise _wire.ReplicaLost(f"{ep['host']}:{ep['port']}: {e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.opened += 1
        try:
            _wire.send(sock, {"m": "hello", "token": ep["token"]})
            got = _wire.recv(sock)
        except (OSError, _wire.WireError) as e:
            sock.close()
            raise _wire.ReplicaLost(f"{ep['host']}:{ep['port']}: {e}") from None
        if got != {"ok": True}:
            sock.close()
            raise _wire.ReplicaLost(f"{ep['host']}:{ep['port']}: refused: {got}")
        return sock

    def _take(self, ep: dict) -> socket.socket | None:
        with self._lock:
            idle = self._idle.get(_key(ep))
            return idle.pop() if idle else None

    def _give(self, ep: dict, sock: socket.socket) -> None:
        with self._lock:
            idle = self._idle.setdefault(_key(ep), [])
            if len(idle) < IDLE_PER_ENDPOINT:
                idle.append(sock)
                return
        sock.close()

    def _discard(self, sock: socket.socket) -> None:
        try:
            sock.close()
        except OSError:
            pass

    def forget(self, ep: dict) -> None:
        """Closes the idle connections to an endpoint (its replica is gone)."""
        with self._lock:
            socks = self._idle.pop(_key(ep), [])
        for s in socks:
            s.close()
