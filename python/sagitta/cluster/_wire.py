"""The cluster's data-path wire format: one request or answer per frame.

A frame is ``MAGIC`` (4 bytes), then little-endian the length of its JSON
text (u32), the number of its buffers (u32) and their total length (u64),
the length of each buffer (u64 each), the JSON text (UTF-8) and the
buffers back to back. The JSON holds the body; values JSON cannot hold
are objects of one key starting with a NUL character, pointing at a
buffer:

- ``{"\\u0000a": [dtype, shape, i]}``: a numpy array (numeric or bool
  dtypes only, C order) in buffer ``i``;
- ``{"\\u0000r": i}``: a pyarrow Table as an Arrow IPC stream;
- ``{"\\u0000y": i}``: bytes.

Tuples travel as lists, numpy scalars as numbers. Nothing in a frame is
executed or unpickled: a malformed one raises :class:`WireError` and the
connection that carried it is closed. A request's body is ``{"m": method,
"a": args, "k": kwargs}``; an answer's ``{"ok": value}`` or ``{"e":
[exception name, message]}``. The first request on a connection must be
``hello`` with the endpoint's token (handed out through Ray, so only a
member of the Ray cluster has it).
"""

from __future__ import annotations

import builtins
import json
import socket
import struct
from typing import Any

import numpy as np

from .. import _sagitta
from ._errors import ShardUnavailable, StaleTerm

MAGIC = b"SGW1"
_PREFIX = struct.Struct("<4sIIQ")
_ARRAY, _ARROW, _BYTES = "\x00a", "\x00r", "\x00y"
# The largest JSON text, buffer count and frame taken (an upsert of a few
# million 384-d rows fits; a corrupt length does not allocate).
MAX_JSON = 64 << 20
MAX_BUFFERS = 1 << 20
MAX_FRAME = 4 << 30
# Buffers at most this large are joined into one send; larger ones are
# sent from where they lie.
_JOIN_BELOW = 1 << 16


class WireError(ValueError):
    """A frame that is not in this format (bad magic, lengths, JSON or
    tagged value)."""


class ReplicaLost(ConnectionError):
    """The connection to a replica failed, or the replica did not answer
    within the time given: it is gone, stopped or stuck."""


class CallTimeout(ReplicaLost):
    """No answer within the time given (the replica may still run)."""


class RemoteError(RuntimeError):
    """An error a replica raised whose type has no counterpart here."""


# -- values ------------------------------------------------------------------


def _encoder(bufs: list):
    def default(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in "biuf?" or v.dtype.hasobject:
                raise WireError(f"array of dtype {v.dtype} cannot be sent")
            a = np.ascontiguousarray(v)
            bufs.append(memoryview(a).cast("B") if a.size else b"")
            return {_ARRAY: [a.dtype.str, list(a.shape), len(bufs) - 1]}
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, (bytes, bytearray, memoryview)):
            bufs.append(bytes(v))
            return {_BYTES: len(bufs) - 1}
        import pyarrow as pa

        if isinstance(v, pa.RecordBatch):
            v = pa.Table.from_batches([v])
        if isinstance(v, pa.Table):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, v.schema) as w:
                w.write_table(v)
            bufs.append(memoryview(sink.getvalue()))
            return {_ARROW: len(bufs) - 1}
        raise WireError(f"a value of type {type(v).__name__} cannot be sent")

    return default


def _buf(bufs: list, i: Any) -> memoryview:
    if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(bufs):
        raise WireError(f"buffer index {i!r} out of range")
    return bufs[i]


def _decoder(bufs: list):
    def hook(d: dict) -> Any:
        if len(d) != 1:
            if any(k[:1] == "\x00" for k in d):
                raise WireError("a tagged value must be an object of one key")
            return d
        ((tag, x),) = d.items()
        if tag[:1] != "\x00":
            return d
        if tag == _BYTES:
            return bytes(_buf(bufs, x))
        if tag == _ARRAY:
            return _array(bufs, x)
        if tag == _ARROW:
            import pyarrow as pa

            b = _buf(bufs, x)
            try:
                return pa.ipc.open_stream(pa.py_buffer(b)).read_all()
            except Exception as e:  # pyarrow's errors vary (ArrowInvalid, OSError, ...)
                raise WireError(f"not an Arrow IPC stream: {e}") from None
        raise WireError(f"unknown tag {tag!r}")

    return hook


def _array(bufs: list, x: Any) -> np.ndarray:
    if not (isinstance(x, list) and len(x) == 3 and isinstance(x[1], list)):
        raise WireError("array: [dtype, shape, buffer] expected")
    if not isinstance(x[0], str):
        raise WireError("array: the dtype must be a string")
    try:
        dt = np.dtype(x[0])
    except (TypeError, ValueError, SyntaxError) as e:
        raise WireError(f"array: dtype {x[0]!r}: {e}") from None
    if dt.kind not in "biuf?" or dt.hasobject:
        raise WireError(f"array: dtype {dt} is not numeric")
    shape = x[1]
    if len(shape) > 32 or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise WireError(f"array: shape {shape!r}")
    b = _buf(bufs, x[2])
    n = 1
    for d in shape:
        n *= d
    if n * dt.itemsize != len(b):
        raise WireError(f"array: {len(b)} bytes for shape {shape} of {dt}")
    return np.frombuffer(b, dtype=dt).reshape(shape) if n else np.zeros(shape, dt)


def encode(body: Any) -> list:
    """A frame holding ``body``, as a list of byte buffers to send in order."""
    bufs: list = []
    try:
        text = json.dumps(body, default=_encoder(bufs), separators=(",", ":")).encode()
    except (TypeError, ValueError) as e:
        raise WireError(f"cannot be sent: {e}") from None
    sizes = [b.nbytes if isinstance(b, memoryview) else len(b) for b in bufs]
    total = sum(sizes)
    if len(text) > MAX_JSON or total > MAX_FRAME:
        raise WireError(f"frame of {len(text)} + {total} bytes is over the limit")
    head = _PREFIX.pack(MAGIC, len(text), len(bufs), total)
    if not bufs:
        return [head + text]
    head += struct.pack(f"<{len(sizes)}Q", *sizes) + text
    if total < _JOIN_BELOW:
        return [b"".join([head, *bufs])]
    parts = [head]
    small = bytearray()
    for b in bufs:
        if len(b) < _JOIN_BELOW:
            small += b
        else:
            if small:
                parts.append(bytes(small))
                small = bytearray()
            parts.append(b)
    if small:
        parts.append(bytes(small))
    return parts


def decode(text: bytes, sizes: list, payload: memoryview) -> Any:
    """The body of a frame from its JSON text, buffer lengths and buffer
    bytes."""
    bufs, at = [], 0
    for n in sizes:
        if at + n > len(payload):
            raise WireError("buffer lengths do not match the frame")
        bufs.append(payload[at : at + n])
        at += n
    if at != len(payload):
        raise WireError("buffer lengths do not match the frame")
    try:
        if not bufs and b"\\u0000" not in text:
            return json.loads(text)  # nothing tagged: the C decoder alone
        return json.loads(text, object_hook=_decoder(bufs))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"not JSON: {e}") from None
    except RecursionError:
        raise WireError("JSON nested too deeply") from None


# -- sockets -----------------------------------------------------------------


def send_parts(sock: socket.socket, parts: list) -> None:
    for part in parts:
        sock.sendall(part)


def send(sock: socket.socket, body: Any) -> None:
    send_parts(sock, encode(body))


def _recv_exact(sock: socket.socket, n: int) -> memoryview:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            raise ReplicaLost("connection closed")
        got += r
    return view


def recv(sock: socket.socket) -> Any:
    """One frame's body. ``ReplicaLost`` when the peer closed, the socket's
    own timeout errors as they are, :class:`WireError` on a bad frame."""
    magic, tlen, nbufs, total = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size))
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r}")
    if tlen > MAX_JSON or nbufs > MAX_BUFFERS or total > MAX_FRAME:
        raise WireError(f"frame of {tlen} + {total} bytes in {nbufs} buffers is over the limit")
    rest = _recv_exact(sock, 8 * nbufs + tlen)
    sizes = list(struct.unpack(f"<{nbufs}Q", rest[: 8 * nbufs])) if nbufs else []
    if sum(sizes) != total:
        raise WireError("buffer lengths do not add up to the frame's")
    text = bytes(rest[8 * nbufs :])
    return decode(text, sizes, _recv_exact(sock, total) if total else memoryview(b""))


# -- errors ------------------------------------------------------------------


def error_body(e: BaseException) -> dict:
    return {"e": [type(e).__name__, str(e)]}


def raise_error(name: str, message: str) -> None:
    """Raises, in the caller, the exception a replica raised: the same
    class when it is one of the cluster's, the extension's or a builtin
    exception, else :class:`RemoteError`."""
    known = {"ShardUnavailable": ShardUnavailable, "StaleTerm": StaleTerm, "WireError": WireError}
    cls = known.get(name) or getattr(_sagitta, name, None) or getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        raise RemoteError(f"{name}: {message}")
    try:
        err = cls(message)
    except Exception:
        raise RemoteError(f"{name}: {message}") from None
    raise err
