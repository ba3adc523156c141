"""``iscc_usearch.sharded``'s names, from :mod:`sagitta.compat.iscc`."""

from sagitta.compat.iscc import (  # noqa: F401
    DEFAULT_SHARD_SIZE,
    UUID_DTYPE,
    ShardedIndex,
    ShardedIndex128,
    ShardedIndexedKeys,
    ShardedIndexedVectors,
)
