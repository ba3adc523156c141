"""iscc-usearch's ``ShardedIndex`` surface over :class:`sagitta.Collection`.

Code written against ``iscc_usearch.ShardedIndex`` / ``ShardedNphdIndex``
runs on Sagitta by changing the import::

    from sagitta.compat.iscc import ShardedIndex, ShardedNphdIndex

The directory holds a Sagitta collection (write-ahead log, sealed
memory-mapped segments, bloom filter, tombstones), not usearch shard
files: open an existing iscc-usearch directory with iscc-usearch and
re-add its rows. Every method maps onto one collection call; the map and
the places where Sagitta deliberately differs are in
``docs/ISCC_USEARCH.md``. In short:

- ``add`` of a key already present raises ``ValueError`` and writes
  nothing (iscc-usearch skips it silently, or stores a second copy when
  the first is in an older shard); ``add_once`` and ``upsert`` behave as
  there.
- ``add(None, ...)`` returns keys that are not in use (iscc-usearch counts
  from the active shard's length and can hand out existing keys).
- Every uint64 key works, ``2**63`` and up included (``2**64 - 1``
  too), with the bloom filter (iscc-usearch raises ``OverflowError`` after storing the vector).
- Writes are durable when acknowledged (per the collection's durability);
  ``save()`` forces an fsync. One writer process per directory (a lock
  file); objects of one process opened on a directory share it.
- ``ShardedIndex128`` / ``ShardedNphdIndex128`` take keys as ``bytes(16)``
  or ``V16`` arrays and return them so (as iscc-usearch); the collection
  is created with ``key_bits=128``, the bytes read as a big-endian
  integer, so every key comes back byte for byte.
- ``multi=True`` (several vectors per key) stores each vector under the
  128-bit id ``key << 64 | ordinal`` (ordinals 0, 1, ... per key) in a
  ``key_bits=128`` collection; keys stay uint64 for the user. Not
  available for the 128-bit classes (``NotImplementedError``).
- ``load()`` / ``view()`` reopen the object in place on a directory,
  writable or read-only (iscc-usearch 0.8.1's sharded classes have
  neither; these follow usearch's ``Index.load`` / ``Index.view``).
- a new ``expansion_add`` applies to the graphs built afterwards, by
  this object; a reopen takes the value the index was created with.
"""

import numpy as np

from ._args import MetricKind, ScalarKind
from ._index import (
    ShardedIndex,
    ShardedIndex128,
    ShardedIndexedKeys,
    ShardedIndexedVectors,
    ShardedNphdIndex,
    ShardedNphdIndex128,
    ShardedNphdIndexedVectors,
)
from ._results import BatchMatches, Match, Matches

# iscc-usearch's default ``shard_size`` (bytes), and its dtype of 128-bit keys.
DEFAULT_SHARD_SIZE = 1024**3
UUID_DTYPE = np.dtype("V16")

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "UUID_DTYPE",
    "BatchMatches",
    "Match",
    "Matches",
    "MetricKind",
    "ScalarKind",
    "ShardedIndex",
    "ShardedIndex128",
    "ShardedIndexedKeys",
    "ShardedIndexedVectors",
    "ShardedNphdIndex",
    "ShardedNphdIndex128",
    "ShardedNphdIndexedVectors",
]
