"""Collections in object storage.

A writer *publishes* a collection's last commit to a location (a local
directory, ``file:///abs/dir``, or ``s3://bucket/prefix`` in builds with
S3 support): its sealed segments, tombstones and bloom filter go under
``data/`` (content-addressed), then a version file listing them with their
CRC32C, then ``LATEST`` (the commit point: a reader never sees a partial
upload). A node *fetches* the latest version into a directory, checking
every file, and opens it as an ordinary collection::

    sagitta.publish(coll, "/mnt/bucket/products")
    sagitta.fetch("/mnt/bucket/products", "/var/cache/products")
    coll = sagitta.Collection.open("/var/cache/products")

See docs/FORMAT.md ("Object storage") for the layout.
"""

from __future__ import annotations

import json
import os
from typing import Any

from . import _sagitta


def _decoded(d: dict[str, Any]) -> dict[str, Any]:
    d["meta"] = json.loads(d["meta"]) if d.get("meta") else None
    return d


def publish(
    collection: _sagitta.Collection,
    location: str,
    *,
    meta: Any = None,
    seal: bool = True,
    keep: int = 2,
) -> dict[str, Any]:
    """Publishes ``collection`` (sealed first unless ``seal=False``, so
    every acknowledged row is in it) as the next version at ``location``;
    ``meta`` (JSON-serialisable) is stored with the version. Keeps the
    newest ``keep`` versions. Returns ``version``, ``generation``,
    ``wal_seq``, ``files``, ``bytes``, ``meta``, ``uploaded_files``,
    ``uploaded_bytes``, ``reused_files``, ``removed_objects``.

    Raises :class:`sagitta.RemoteStoreError` when the store refuses (the
    collection is untouched and the previous version stays latest)."""
    text = None if meta is None else json.dumps(meta)
    return _decoded(_sagitta.publish(collection, location, text, seal, keep))


def fetch(location: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Downloads the latest version at ``location`` into ``path`` (which must
    not hold a collection; files already there with the listed checksum
    are kept) and installs its manifest last; open it with
    :meth:`sagitta.Collection.open`. Raises ``FileNotFoundError`` when
    nothing is published there and :class:`sagitta.CorruptFileError` when
    an object does not match its checksum."""
    return _decoded(_sagitta.fetch(location, os.fspath(path)))


def published(location: str) -> dict[str, Any] | None:
    """The latest version at ``location`` (as :func:`publish` returns it,
    without the upload figures), or None."""
    d = _sagitta.published(location)
    return None if d is None else _decoded(d)
