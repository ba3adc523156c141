"""One writable collection per directory in this process, shared by every
compat object opened on it.

A directory admits one writer (its lock file); iscc-usearch lets several
of its objects open one directory in a process. Here the second object
opened writable on a directory gets the collection the first one has, so
both read and write the same rows, and the lock still keeps other
processes out. The collection closes when its last object closes (or
when they are all garbage)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

from ..._sagitta import Collection


class Shared:
    """A collection and the number of compat objects using it."""

    def __init__(self, coll: Collection) -> None:
        self.coll: Collection | None = coll
        self.users = 0


_WRITERS: weakref.WeakValueDictionary[str, Shared] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def acquire(path: Path, read_only: bool, create: Callable[[], Collection] | None = None) -> Shared:
    """The collection in ``path``: a reader of its own when ``read_only``,
    else the process's writer of that directory (opened, or made by
    ``create``, when there is none yet)."""
    if read_only:
        s = Shared(Collection.open(path, read_only=True))
        s.users = 1
        return s
    key = os.path.realpath(path)
    with _LOCK:
        s = _WRITERS.get(key)
        if s is None or s.coll is None:
            s = Shared(create() if create is not None else Collection.open(path))
            _WRITERS[key] = s
        s.users += 1
        return s


def release(s: Shared) -> None:
    """One user fewer; the last one closes the collection (sealing its
    tail: nothing to replay at the next open)."""
    with _LOCK:
        s.users -= 1
        if s.users > 0 or s.coll is None:
            return
        coll, s.coll = s.coll, None
    coll.close()
