"""``iscc_usearch.sharded_nphd``'s names, from :mod:`sagitta.compat.iscc`."""

from sagitta.compat.iscc import (  # noqa: F401
    ShardedNphdIndex,
    ShardedNphdIndex128,
    ShardedNphdIndexedVectors,
)
