"""``iscc_usearch.index.Index``: only a stale test (listed in the skip
file) constructs it; the name is usearch's in-memory ``Index``, which
iscc-usearch's class extends, so that the module imports."""

from usearch.index import Index  # noqa: F401
