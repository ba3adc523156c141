"""A Sagitta collection sharded and replicated over a Ray cluster, with
sealed segments in object storage (docs/CLUSTER.md).

>>> import ray, sagitta.cluster as sc
>>> ray.init(address="auto")
>>> c = sc.Cluster.create("docs", ndim=384, metric="cos", location="/mnt/bucket")
>>> c.upsert(keys, vectors, {"lang": langs})
>>> c.search(query, k=10, where={"lang": "en"}).keys

Requires ``ray`` (``pip install ray``) and ``pyarrow``.
"""

from ._client import Cluster, ClusterSearchResult, ClusterUnavailable
from ._controller import live_nodes
from ._layout import NO_KEY
from ._replica import ShardUnavailable

__all__ = [
    "NO_KEY",
    "Cluster",
    "ClusterSearchResult",
    "ClusterUnavailable",
    "ShardUnavailable",
    "live_nodes",
]
