"""Sagitta: a vector search engine, from Python.

>>> import numpy as np, sagitta
>>> index = sagitta.Index(ndim=4, metric="l2")
>>> index.add(np.arange(3), np.eye(3, 4, dtype=np.float32))
>>> index.search(np.array([1, 0, 0, 0], dtype=np.float32), k=2).keys
array([0, 1], dtype=uint64)

See ``help(sagitta.Index)`` and the package README.
"""

from ._sagitta import (
    LIMITS,
    NO_KEY,
    Collection,
    CollectionIterator,
    CorruptFileError,
    Index,
    LockedError,
    LowDimIndex,
    PayloadError,
    ReadOnlyError,
    RemoteStoreError,
    SearchResult,
    TextSearchResult,
    __version__,
    isa,
    string_key,
)
from .client import (
    AuthError,
    BadRequestError,
    Client,
    ConflictError,
    NotFoundError,
    RemoteCollection,
    RemoteSearchResult,
    RemoteTextResult,
    ServerError,
    StorageFullError,
    UnavailableError,
)
from .remote import fetch, publish, published

__all__ = [
    "LIMITS",
    "NO_KEY",
    "AuthError",
    "BadRequestError",
    "Client",
    "Collection",
    "CollectionIterator",
    "ConflictError",
    "CorruptFileError",
    "Index",
    "LockedError",
    "LowDimIndex",
    "NotFoundError",
    "PayloadError",
    "ReadOnlyError",
    "RemoteCollection",
    "RemoteSearchResult",
    "RemoteStoreError",
    "RemoteTextResult",
    "SearchResult",
    "ServerError",
    "StorageFullError",
    "TextSearchResult",
    "UnavailableError",
    "__version__",
    "fetch",
    "isa",
    "publish",
    "published",
    "string_key",
]
