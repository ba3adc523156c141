"""Longbow-style Arrow Flight benchmark: ``sagitta serve`` and the peer
Longbow (github 23skdu/longbow, a Go Arrow Flight vector database) in the
same run, on the same rows and queries, through the same client code
(``pyarrow.flight``; both speak Longbow's tickets and actions).

Both servers run on loopback for the whole run. For each operation the
engines take turns (the first engine rotating from operation to
operation); only one engine is measured at any time.

1. **DoPut**: the first N rows of debian-minilm (384-d float32,
   re-normalised from the stored float16) with ``id`` int64, ``vector``
   fixed_size_list<float32>[384] and the payload columns ``category``
   (string, from the row number: ``category_of``) and ``text`` (the row's
   passage), in batches of ``--batch`` rows in one DoPut stream. MB/s =
   (vector + id bytes) / wall seconds until the stream closed. Then the
   time until the engine has indexed every row: Longbow indexes after
   DoPut returns (``longbow.sh wait``, plus our own poll of its insert
   counter for the time of the last insert); Sagitta acknowledges rows
   once durable and searchable, and its background optimizer builds the
   HNSW segments afterwards (polled over HTTP ``/collections/C/index``).
   Searches start only after both.
2. **DoGet download** of the whole dataset (``{"name": D}``), MB/s of the
   Arrow data received, median of ``--download-reps``; and once with
   Longbow's ``filters`` in the download ticket.
3. **Search** (DoGet ``{"search": {...}}``, k=10) at concurrency 1 and 8
   (threads, each with its own FlightClient): QPS, p50, p99, recall@10
   against exact cosine top-10 (numpy) over the same N rows.
4. **Filtered search** (``category eq X``, X rotating over the 4
   categories, 25 % of rows each): the same, recall against the exact
   top-10 among the rows of that category, and the share of returned rows
   that pass the filter.
5. **Hybrid search** (``text_query`` = the query's passage, ``alpha``
   0.5): QPS, p50, p99 (no recall).
6. **Search by id** (DoAction ``VectorSearchByID``, ids as strings, as
   Longbow's SDK sends them): QPS, p50, p99, recall@10 against the exact
   neighbours of the stored row, the row itself left out.
7. **Delete** (DoAction ``delete``, one id per action, ids as strings):
   ops/s, then the rows a full download returns.

No engine-specific setup: both create the dataset at the first DoPut and
index its string columns for BM25 there (Sagitta by default, Longbow
started by ``shared/peers/longbow.sh`` with ``LONGBOW_HYBRID_TEXT_COLUMNS=
meta,text``). An operation that fails is recorded as ``error: <message>``
for that engine; the run goes on.

``python -m sagitta_bench longbow --rows 20000 --queries 1000``
"""

from .flight import OpFailed
from .report import markdown
from .run import main, run
from .truth import (
    CATEGORIES,
    K,
    as_ids,
    by_id_truth,
    category_of,
    exact_topk,
    filter_pass_share,
    filtered_truth,
    id_json,
    latency_summary,
    query_category,
    recall,
    recall_without_self,
)

__all__ = [
    "CATEGORIES",
    "K",
    "OpFailed",
    "as_ids",
    "by_id_truth",
    "category_of",
    "exact_topk",
    "filter_pass_share",
    "filtered_truth",
    "id_json",
    "latency_summary",
    "main",
    "markdown",
    "query_category",
    "recall",
    "recall_without_self",
    "run",
]
