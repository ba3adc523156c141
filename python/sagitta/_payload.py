"""Conversions between Python payload inputs and the Arrow IPC bytes the
extension reads and writes. Needs ``pyarrow`` (imported on first use)."""

from __future__ import annotations

import json
from typing import Any


def _pa():
    try:
        import pyarrow as pa
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("payload columns need pyarrow: pip install 'sagitta[payload]'") from e
    return pa


def _plain(pa, arr):
    """Dictionary columns (pandas categoricals) become their value type."""
    if pa.types.is_dictionary(arr.type):
        return arr.cast(arr.type.value_type)
    return arr


def to_ipc(payload: Any) -> bytes:
    """A pyarrow Table / RecordBatch, a pandas DataFrame or a dict of
    columns (numpy arrays or lists) as one Arrow IPC stream."""
    pa = _pa()
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    if isinstance(payload, pa.RecordBatch):
        table = pa.Table.from_batches([payload])
    elif isinstance(payload, pa.Table):
        table = payload
    elif isinstance(payload, dict):
        cols = {}
        for name, col in payload.items():
            if not isinstance(name, str):
                raise ValueError(f"payload: column names must be strings, got {name!r}")
            try:
                cols[name] = col if isinstance(col, (pa.Array, pa.ChunkedArray)) else pa.array(col)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
                raise ValueError(f"payload: column {name!r}: {e}") from None
        table = pa.table(cols)
    elif type(payload).__name__ == "DataFrame" and hasattr(payload, "columns"):
        try:
            table = pa.Table.from_pandas(payload, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise ValueError(f"payload: {e}") from None
    else:
        raise TypeError(
            "payload: expected a dict of columns, a pandas DataFrame or a pyarrow Table, "
            f"got {type(payload).__name__}"
        )
    table = pa.table(
        [_plain(pa, c.combine_chunks()) for c in table.columns], names=table.column_names
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes):
    """Arrow IPC stream bytes as a pyarrow Table."""
    pa = _pa()
    return pa.ipc.open_stream(data).read_all()


def with_keys(table, keys):
    """``table`` with a leading uint64 ``key`` column."""
    pa = _pa()
    return table.add_column(0, "key", pa.array(keys, type=pa.uint64()))


def filter_json(where: Any) -> str:
    """A filter given as a dict / list (or JSON text) as JSON text."""
    if isinstance(where, str):
        return where

    def plain(o):
        # numpy scalars and arrays in a filter (np.int64(2020), arrays of values)
        if hasattr(o, "tolist"):
            return o.tolist()
        raise TypeError(f"{type(o).__name__} is not JSON-serialisable")

    try:
        return json.dumps(where, default=plain)
    except (TypeError, ValueError) as e:
        raise ValueError(f"where: not JSON-serialisable: {e}") from None


def split_values(values: Any, known: list) -> tuple:
    """``values=`` of ``set_payload`` (a dict of column -> one value) in two
    parts: the columns in ``known`` (the schema's) as a JSON object, read
    by the schema's types (numpy scalars and arrays as their Python
    values, datetimes as RFC 3339 with naive ones taken as UTC, None as
    null), and the new columns as a dict of one-row lists, typed by
    pyarrow as an upsert's payload is (a None there adds nothing)."""
    import datetime as dt

    if not isinstance(values, dict):
        raise TypeError(f"values: expected a dict of column -> value, got {type(values).__name__}")

    def plain(o):
        if isinstance(o, dt.datetime):
            if o.tzinfo is None:
                o = o.replace(tzinfo=dt.timezone.utc)
            return o.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
        if hasattr(o, "tolist"):
            return o.tolist()
        if isinstance(o, (tuple, set, frozenset)):
            return list(o)
        raise TypeError(f"{type(o).__name__} is not a payload value")

    old, new = {}, {}
    for name, v in values.items():
        if not isinstance(name, str):
            raise ValueError(f"values: column names must be strings, got {name!r}")
        if name in known:
            old[name] = v
        elif v is not None:
            new[name] = [list(v) if isinstance(v, (tuple, set, frozenset)) else v]
    try:
        return json.dumps(old, default=plain, allow_nan=False), new
    except (TypeError, ValueError) as e:
        raise ValueError(f"values: {e}") from None
