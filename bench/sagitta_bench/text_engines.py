"""The engines of the text mode (``text.py``), each through its public
Python API. An adapter's ``run(task, work, bench)`` builds what it needs
with ``bench.ingest`` (timed) and times each search method with
``bench.method(name, fn)``, ``fn(query) -> keys`` asking for the top
``ASK`` (11: the query's own row is dropped when scoring)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

K = 10  # scored depth (text.py scores the top K)
ASK = K + 1  # asked of each engine: the query's own row is dropped
BATCH = 10_000  # rows per upsert / table write
EMBED_MODEL = "all-minilm-l6-v2"  # the model debian-minilm's vectors came from
RRF_KS = (10, 60)
DEPTHS = (20, 50, 100)
ALPHAS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


class LanceText:
    """LanceDB: one table (id, text, float32 vector); its native FTS index
    with defaults; hybrid search with its default reranker (RRF, K=60, over
    each leg's top ``limit``), first over flat vectors (exact scan), then
    with an IVF_HNSW_SQ index (cosine, defaults)."""

    def version(self) -> str:
        import lancedb

        return lancedb.__version__

    def notes(self, bench) -> list[str]:
        return [
            "hybrid = `table.search(query_type='hybrid').vector(v).text(t).limit(11)`: "
            "LanceDB's default RRFReranker (K=60) over each leg's top 11",
            "FTS = `table.search(t, query_type='fts').limit(11)` on "
            "`create_fts_index('text')` with its defaults (native FTS)",
            f"the flat-vector hybrid ran on the first {bench.n_queries['slow']} queries only "
            "(an exact vector scan per query)",
        ]

    def run(self, task, work: Path, b) -> None:
        # Else LanceDB logs a deprecation warning to stderr on every query
        # that selects columns (inside the timed loop).
        os.environ.setdefault("LANCEDB_LOG", "error")
        import lancedb
        import pyarrow as pa

        path = work / "lancedb"
        db = lancedb.connect(str(path))
        n, d = task.vectors.shape
        data = pa.table(
            {
                "id": pa.array(task.keys.astype(np.int64)),
                "text": pa.array(task.texts, type=pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(task.vectors.ravel()), d),
            }
        )
        table = b.ingest(
            "create_table (id, text, float32 vector)",
            lambda: db.create_table("docs", data, mode="overwrite"),
            rows=n,
            path=path,
        )
        b.ingest(
            "create_fts_index('text'), defaults",
            lambda: table.create_fts_index("text"),
            rows=n,
            path=path,
        )

        def ids(query) -> np.ndarray:
            return query.limit(ASK).select(["id"]).to_arrow().column("id").to_numpy()

        def fts(q):
            return ids(table.search(q.text, query_type="fts"))

        def hybrid(q):
            return ids(table.search(query_type="hybrid").vector(q.vector).text(q.text))

        b.method("FTS (BM25)", fts)
        b.method("hybrid, flat vectors (RRF)", hybrid, subset="slow")
        b.ingest(
            "create_index IVF_HNSW_SQ (cosine, defaults)",
            lambda: table.create_index(metric="cosine", index_type="IVF_HNSW_SQ"),
            rows=n,
            path=path,
        )
        b.method("dense only, IVF_HNSW_SQ (reference)", lambda q: ids(table.search(q.vector)))
        b.method("hybrid, IVF_HNSW_SQ (RRF)", hybrid)


class TantivyText:
    """Tantivy (the Rust full-text engine, through ``tantivy-py``): one
    index of (id, text), the text analysed as Sagitta's ``en`` analyzer
    does (split on non-alphanumerics, tokens over 40 bytes dropped,
    lower-cased, English stop words, English Snowball stemmer), one
    writer thread, merged to one segment; BM25 with its fixed k1 1.2 and
    b 0.75. A query is its text analysed by the same analyzer, its
    distinct terms a disjunction (a boolean query of ``Should`` term
    queries, as Sagitta scores them), searched for the top ``ASK``. Row
    ids come from a table built once from the stored ids (outside the
    timing), so a search pays no document fetch."""

    def version(self) -> str:
        from importlib.metadata import version

        return version("tantivy")

    def notes(self, bench) -> list[str]:
        return [
            "tantivy: analyzer simple tokenizer + remove_long(40) + lowercase + "
            "stopword('english') + stemmer('english'); BM25 k1 1.2, b 0.75 (not settable); "
            "query = boolean_query of Should term_query (freq) over the query's distinct "
            "analysed terms, `searcher.search(query, 11)`, hits mapped to row ids by a table "
            "built once"
        ]

    def run(self, task, work: Path, b) -> None:
        import tantivy

        path = work / "tantivy"
        path.mkdir(parents=True, exist_ok=True)
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("id", stored=True, indexed=False)
        sb.add_text_field("text", stored=False, tokenizer_name="sg_en")
        index = tantivy.Index(sb.build(), path=str(path))
        analyzer = (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stopword("english"))
            .filter(tantivy.Filter.stemmer("english"))
            .build()
        )
        index.register_tokenizer("sg_en", analyzer)
        n = len(task.keys)

        def load() -> None:
            w = index.writer(heap_size=256 << 20, num_threads=1)
            for key, text in zip(task.keys.tolist(), task.texts):
                w.add_document(tantivy.Document(id=int(key), text=text))
            w.commit()
            w.wait_merging_threads()
            index.reload()

        b.ingest("add_document + commit (one writer thread)", load, rows=n, path=path)
        searcher = index.searcher()
        every = searcher.search(tantivy.Query.all_query(), n).hits
        row = {(a.segment_ord, a.doc): searcher.doc(a)["id"][0] for _, a in every}
        schema = index.schema
        should = tantivy.Occur.Should

        def bm25(q):
            terms = dict.fromkeys(analyzer.analyze(q.text))  # distinct, in order
            query = tantivy.Query.boolean_query(
                [(should, tantivy.Query.term_query(schema, "text", t, "freq")) for t in terms]
            )
            hits = searcher.search(query, ASK).hits
            return np.array([row[(a.segment_ord, a.doc)] for _, a in hits], dtype=np.int64)

        b.method("BM25", bm25)


def load_collection(c, task, vectors: bool = True, rows: int | None = None) -> None:
    """``upsert`` the first ``rows`` of the corpus in batches: keys, the
    vectors (or None: the engine embeds the texts) and the text payload."""
    n = len(task.keys) if rows is None else rows
    for s in range(0, n, BATCH):
        e = min(s + BATCH, n)
        vec = task.vectors[s:e] if vectors else None
        c.upsert(task.keys[s:e], vec, payload={"text": task.texts[s:e]})


def embed_agreement(c, task, rows: int) -> dict:
    """Cosine between the vectors the engine embedded for the first
    ``rows`` texts and the dataset's: its model should be the one the
    dataset's vectors came from."""
    try:
        got = np.stack([np.asarray(v, dtype=np.float32) for v in c.get(task.keys[:rows])])
        got /= np.linalg.norm(got, axis=1, keepdims=True)
        cos = (got * task.vectors[:rows]).sum(axis=1)
        return {"rows": rows, "mean_cos": float(cos.mean()), "min_cos": float(cos.min())}
    except Exception as e:  # a diagnostic, not the benchmark
        return {"rows": rows, "error": f"{type(e).__name__}: {e}"}


class SagittaText:
    """Sagitta: a Collection with ``text_fields=["text"]`` (BM25 over the
    payload column, English analyzer) loaded by ``upsert`` with vectors,
    ``optimize()``, closed and reopened read-only; dense, BM25, hybrid at
    the default fusion and a fusion sweep. Then a second collection with
    ``embed_model`` for hybrid search with the query embedded by the
    engine (``search(None, k, text=...)``)."""

    def __init__(self) -> None:
        self.agreement: dict | None = None
        self.first: list[dict] = []

    def version(self) -> str:
        import sagitta

        return f"{sagitta.__version__} ({sagitta.isa()})"

    def notes(self, bench) -> list[str]:
        out = []
        if 0 < bench.n_queries["sweep"] < bench.n_queries["all"]:
            out.append(f"the fusion sweep ran on the first {bench.n_queries['sweep']} queries")
        a = self.agreement
        if a and "mean_cos" in a:
            out.append(
                f"engine-embedded vectors of {a['rows']} corpus texts against the dataset's: "
                f"mean cosine {a['mean_cos']:.4f}, min {a['min_cos']:.4f}"
            )
        elif a:
            out.append(f"engine-embedded vectors could not be read back: {a['error']}")
        for f in self.first:
            out.append(
                f"query embedded by the engine, fresh process, {f['pause_s']:g} s between "
                f"open and the first query: open {f['open_ms']:.1f} ms, first query "
                f"{f['first_ms']:.2f} ms, the next {f['rest']} p50 {f['rest_p50_ms']:.2f} ms"
            )
        return out

    def run(self, task, work: Path, b) -> None:
        import sagitta

        n, d = task.vectors.shape
        path = work / "coll"
        c = sagitta.Collection.create(path, ndim=d, metric="cos", text_fields=["text"])
        b.ingest("upsert (10,000-row batches, vectors + text)", lambda: load_collection(c, task), n)
        b.ingest("optimize() (HNSW + text index)", c.optimize, rows=n, path=path)
        c.close()
        c = sagitta.Collection.open(path, read_only=True)

        def fused(**kw):
            return lambda q: c.search(q.vector, ASK, text=q.text, **kw).keys

        b.method("dense only (reference)", lambda q: c.search(q.vector, ASK).keys)
        b.method("BM25 only", lambda q: c.search(None, ASK, text=q.text).keys)
        b.method("hybrid, default fusion", fused())
        sweep = {"subset": "sweep", "group": "sweep"}
        for k in RRF_KS:
            for depth in DEPTHS:
                kw = {"fusion": "rrf", "rrf_k": k, "depth": depth}
                b.method(f"RRF k={k}, depth {depth}", fused(**kw), **sweep, **kw)
        for alpha in ALPHAS:
            kw = {"fusion": "alpha", "alpha": alpha, "depth": 50}
            b.method(f"alpha {alpha}, depth 50", fused(**kw), **sweep, **kw)
        for depth in (10, 20, 100):
            kw = {"fusion": "alpha", "alpha": 0.3, "depth": depth}
            b.method(f"alpha 0.3, depth {depth}", fused(**kw), **sweep, **kw)
        for depth in DEPTHS:
            kw = {"fusion": "dbsf", "depth": depth}
            b.method(f"DBSF, depth {depth}", fused(**kw), **sweep, **kw)
        c.close()
        if not b.cfg["skip_embed"]:
            self.run_embedded(task, work, b)

    def run_embedded(self, task, work: Path, b) -> None:
        """The embed_model collection: loaded by embedding every text when
        ``--embed-rows`` covers the corpus, else from the given vectors
        (the model then embeds only the queries) after timing the
        embedding of ``--embed-rows`` or ``--embed-sample`` texts in a
        throwaway collection."""
        import sagitta

        n, d = task.vectors.shape
        opts = {"ndim": d, "metric": "cos", "text_fields": ["text"], "embed_model": EMBED_MODEL}
        m = min(b.cfg["embed_rows"] or b.cfg["embed_sample"], n)
        path = work / "coll-embed"
        c = sagitta.Collection.create(path, **opts)
        if m == n:
            b.ingest(
                f"embed_model collection: upsert {n} texts, no vectors (the engine embeds)",
                lambda: load_collection(c, task, vectors=False),
                rows=n,
            )
            self.agreement = embed_agreement(c, task, min(n, 1000))
        else:
            if m > 0:
                p = work / "coll-embed-sample"
                s = sagitta.Collection.create(p, **opts)
                b.ingest(
                    f"embed_model collection: upsert {m} texts, no vectors (embedding throughput)",
                    lambda: load_collection(s, task, vectors=False, rows=m),
                    rows=m,
                )
                self.agreement = embed_agreement(s, task, m)
                s.close()
            b.ingest(
                "embed_model collection: upsert with the given vectors",
                lambda: load_collection(c, task),
                rows=n,
            )
        b.ingest("embed_model collection: optimize()", c.optimize, rows=n, path=path)
        c.close()
        c = sagitta.Collection.open(path, read_only=True)
        b.method(
            "hybrid, query embedded by the engine",
            lambda q: c.search(None, ASK, text=q.text).keys,
        )
        c.close()
        texts = [q.text for q in task.queries[:51]]
        self.first = [first_query(path, texts, pause) for pause in (0.0, 2.0)]


FIRST_QUERY = """
import json, sys, time
import numpy as np
import sagitta
path, pause, texts = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
t = time.perf_counter()
c = sagitta.Collection.open(path, read_only=True)
open_ms = (time.perf_counter() - t) * 1e3
time.sleep(pause)
lat = []
for text in texts:
    t = time.perf_counter()
    c.search(None, 11, text=text)
    lat.append((time.perf_counter() - t) * 1e3)
print(json.dumps({"pause_s": pause, "open_ms": open_ms, "first_ms": lat[0],
                  "rest": len(lat) - 1, "rest_p50_ms": float(np.median(lat[1:]))}))
"""


def first_query(path: Path, texts: list[str], pause: float) -> dict:
    """Opens the embed_model collection in a fresh process (the model not
    yet loaded there), waits ``pause`` seconds (0: a query at once; 2: a
    server that opened its collections at start), then times the first
    query and the next ones."""
    out = subprocess.run(
        [sys.executable, "-c", FIRST_QUERY, str(path), str(pause), json.dumps(texts)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


ADAPTERS = {"sagitta": SagittaText, "lancedb": LanceText, "tantivy": TantivyText}


def sagitta_text_api_error() -> str | None:
    """Why the installed sagitta cannot run the text mode (a tiny
    collection through the calls the mode makes), or None."""
    try:
        import sagitta
    except ImportError as e:
        return f"import sagitta: {e}"
    with tempfile.TemporaryDirectory(prefix="sgb-text-check-") as tmp:
        try:
            c = sagitta.Collection.create(
                Path(tmp) / "c", ndim=4, metric="cos", text_fields=["text"]
            )
            v = np.eye(4, dtype=np.float32)[:3]
            texts = ["red apple pie", "green pear", "blue sky"]
            c.upsert(np.arange(3, dtype=np.uint64), v, payload={"text": texts})
            c.optimize()
            c.search(None, 2, text="apple").keys  # noqa: B018 - the attribute must exist
            r = c.search(v[0], 2, text="apple", fusion="rrf", rrf_k=60, depth=50)
            for attr in ("keys", "scores", "dense_ranks", "text_ranks"):
                getattr(r, attr)
            c.close()
        except Exception as e:
            return f"{type(e).__name__}: {e}"
    return None
