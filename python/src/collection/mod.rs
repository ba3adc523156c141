//! `sagitta.Collection`: a durable, sharded collection on a directory.
//!
//! This file holds the class, its lifecycle (create, open, close) and its
//! Python methods, each documented here (the docstrings are the Python
//! docs); the longer bodies live beside it: `write` (add, upsert, remove,
//! set_payload), `read` (search, get, contains, scan), `keys` (64-bit keys
//! and 128-bit ids of a lookup), `args` (payloads, filters and columns
//! from Python) and `iter` (`CollectionIterator`).

mod args;
mod iter;
mod keys;
mod read;
mod write;

pub use iter::PyCollectionIter;

use crate::errors::store_err;
use crate::index::param_err;
use crate::keys128;
use args::{bind_where, text_fields_arg};
use keys::wide;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyTuple};
use read::SearchArgs;
use sagitta_index::IndexError;
use sagitta_store::{Collection, CollectionOptions, Id, OpenMode, StoreError};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use write::WriteKind;

/// A collection of vectors on a directory: a mutable part and any number of
/// sealed, memory-mapped segments, with a write-ahead log.
///
/// Every write is in the log before the call returns (and fsynced first
/// under ``durability="batch"``, the default), so a crash loses nothing
/// acknowledged; it is copied into the mutable part (searched exactly, so it
/// is found at once) and never waits for an index build. Past
/// ``segment_size`` bytes the mutable part is written to a segment file in
/// the background, where an optimizer builds its HNSW index and merges
/// segments (``optimize()`` waits for it, ``stats()["optimizer"]`` shows
/// it). ``close()`` writes the mutable part out, so opening only reads the
/// manifest and maps the segments: its cost does not grow with the number
/// of vectors.
///
/// One process may open a collection for writing (others get
/// :class:`LockedError`); any number may open it with ``read_only=True``,
/// each seeing it as of the moment it opened. Usable as a context manager;
/// every heavy call releases the GIL.
#[derive(Debug)]
#[pyclass(name = "Collection", module = "sagitta", frozen)]
pub struct PyCollection {
    inner: parking_lot::RwLock<Option<Arc<Collection>>>,
}

impl PyCollection {
    pub(crate) fn coll(&self) -> PyResult<Arc<Collection>> {
        self.inner
            .read()
            .clone()
            .ok_or_else(|| PyValueError::new_err("the collection is closed"))
    }
}

#[pymethods]
impl PyCollection {
    /// Creates a collection in the directory ``path`` (created if missing;
    /// it must not already hold one) and opens it for writing.
    ///
    /// ndim / metric / dtype / kind / connectivity / expansion_add /
    /// expansion_search: as for :class:`Index`. segment_size: the
    /// mutable part (searched exactly) is frozen and flushed past this many
    /// bytes (default 64 MiB); the background optimizer then builds its
    /// index. max_segment_size: the optimizer merges segments up to this
    /// size (default 16 GiB). durability:
    /// ``"batch"`` (fsync before each write returns), ``"off"`` (never
    /// fsync; survives a process crash, not a power loss), or a number of
    /// milliseconds such as ``"100ms"`` (fsync in the background at that
    /// interval). key_bits: 64, or 128 for 128-bit keys (ints up to
    /// 2**128 - 1, 16 big-endian bytes, V16/S16 arrays or (n, 2) arrays of
    /// (high, low) uint64 halves; arrays of keys come back as (..., 2)
    /// uint64 arrays, a single key as an int).
    /// bits / partitions / nprobe / refine: as for :class:`Index` with
    /// ``kind="ivf_rq"``; the active segment is then HNSW, and each
    /// segment is trained on its own vectors when it is sealed. codes:
    /// compact codes the built HNSW segments traverse the graph with,
    /// keeping the float32 vectors beside them (memory-mapped) to re-score
    /// each search's beam exactly: ``"sq8"`` (the default for float32
    /// vectors under cos / l2 / ip, whether ``dtype`` is given or not, as
    /// in the server), ``"f16"``, ``"sq16"``, or ``"none"`` (a plain
    /// graph; the default for f16, i8 and bit vectors). Vectors written,
    /// read back and searched stay float32 (``dtype``); only the graph's
    /// traversal uses the codes. text_fields: payload string columns to
    /// index for full-text (BM25) search, a list of names (English
    /// analyzer: lower-casing, stop words, Snowball stemming) or a dict
    /// ``{name: "en" | "simple"}``. embed_model: a built-in embedding model
    /// (``"all-minilm-l6-v2"``, fetched by ``scripts/fetch-model``) for
    /// the first text field: ``upsert(keys, None, payload={field: texts})``
    /// embeds the texts and ``search(None, k, text=...)`` the query.
    /// bm25_k1 / bm25_b: BM25 parameters of text queries (default 0.9 and
    /// 0.4). index_threshold: HNSW segments with fewer rows are kept
    /// without a graph and searched by exact scan (at that size a scan
    /// costs no more than a graph walk, and is exact); ``None`` (default):
    /// from the planner's cost model (about 40k 256-bit codes, 1.7k 384-d
    /// float rows), ``0``: every segment gets a graph.
    #[staticmethod]
    #[pyo3(signature = (path, *, ndim, metric = "cos", dtype = None, kind = "hnsw", segment_size = 64 << 20, max_segment_size = None, durability = "batch", key_bits = 64, connectivity = 16, expansion_add = 128, expansion_search = 64, bits = 1, partitions = None, nprobe = 8, refine = None, codes = None, text_fields = None, embed_model = None, bm25_k1 = None, bm25_b = None, index_threshold = None))]
    #[allow(clippy::too_many_arguments)]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        ndim: i64,
        metric: &str,
        dtype: Option<&str>,
        kind: &str,
        segment_size: u64,
        max_segment_size: Option<u64>,
        durability: &str,
        key_bits: u32,
        connectivity: i64,
        expansion_add: i64,
        expansion_search: i64,
        bits: i64,
        partitions: Option<i64>,
        nprobe: i64,
        refine: Option<i64>,
        codes: Option<&str>,
        text_fields: Option<&Bound<'_, PyAny>>,
        embed_model: Option<String>,
        bm25_k1: Option<f64>,
        bm25_b: Option<f64>,
        index_threshold: Option<u64>,
    ) -> PyResult<Self> {
        // Translated into the store's options (usearch's names to the
        // store's, Python ints to unsigned ones); the store parses and
        // validates them (CollectionOptions::to_config), the same as for
        // the server.
        let count = |v: i64| usize::try_from(v).unwrap_or(0);
        let options = CollectionOptions {
            dims: usize::try_from(ndim).map_err(|_| {
                PyValueError::new_err(format!("ndim: must be in 1..=65536, got {ndim}"))
            })?,
            metric: Some(metric.into()),
            dtype: dtype.map(Into::into),
            kind: Some(kind.into()),
            m: Some(count(connectivity)),
            ef_construction: Some(count(expansion_add)),
            ef_search: Some(count(expansion_search)),
            ivf_bits: Some(u8::try_from(bits).unwrap_or(0)),
            ivf_partitions: partitions.map(count),
            ivf_nprobe: Some(count(nprobe)),
            ivf_refine: refine
                .map(|r| {
                    usize::try_from(r).map_err(|_| {
                        PyValueError::new_err(format!("refine: must be >= 0, got {r}"))
                    })
                })
                .transpose()?,
            codes: codes.map(Into::into),
            segment_size: Some(segment_size),
            max_segment_size,
            durability: Some(durability.into()),
            key_bits: Some(key_bits),
            text_fields: text_fields_arg(text_fields)?,
            embed_model,
            bm25_k1: bm25_k1.map(|k1| k1 as f32),
            bm25_b: bm25_b.map(|b| b as f32),
            index_threshold,
            ..CollectionOptions::default()
        };
        let param = |e| param_err(e, connectivity, expansion_add, expansion_search);
        let cfg = options.to_config().map_err(|e| match e {
            StoreError::Index(e @ IndexError::InvalidParameter { .. }) => param(e),
            e => store_err(e),
        })?;
        let c = py
            .detach(|| Collection::create(&path, cfg))
            .map_err(|e| match e {
                StoreError::Index(e @ IndexError::InvalidParameter { .. }) => {
                    param_err(e, connectivity, expansion_add, expansion_search)
                }
                e => store_err(e),
            })?;
        Ok(PyCollection {
            inner: parking_lot::RwLock::new(Some(Arc::new(c))),
        })
    }

    /// Opens the collection in ``path``: for writing (one process at a
    /// time), or with ``read_only=True`` as one of any number of readers.
    #[staticmethod]
    #[pyo3(signature = (path, *, read_only = false))]
    fn open(py: Python<'_>, path: PathBuf, read_only: bool) -> PyResult<Self> {
        let mode = if read_only {
            OpenMode::ReadOnly
        } else {
            OpenMode::ReadWrite
        };
        let c = py
            .detach(|| Collection::open(&path, mode))
            .map_err(store_err)?;
        Ok(PyCollection {
            inner: parking_lot::RwLock::new(Some(Arc::new(c))),
        })
    }

    /// What the manifest in ``path`` says, without opening the collection
    /// (no lock, no mapping, no log replay): ``ndim``, ``metric``,
    /// ``dtype``, ``kind``, ``connectivity``, ``expansion_add``,
    /// ``expansion_search``, ``key_bits``, ``segments`` and
    /// ``sealed_vectors`` (rows still in the write-ahead log are not
    /// counted), ``format``, ``generation``.
    #[staticmethod]
    fn metadata<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        let m = py
            .detach(|| Collection::metadata(&path))
            .map_err(store_err)?;
        let d = PyDict::new(py);
        let c = &m.config;
        d.set_item("ndim", c.space.dims)?;
        d.set_item("metric", c.space.metric.name())?;
        d.set_item("dtype", c.space.dtype.name())?;
        d.set_item("kind", c.kind.name())?;
        d.set_item("connectivity", c.hnsw.m)?;
        d.set_item("expansion_add", c.hnsw.ef_construction)?;
        d.set_item("expansion_search", c.hnsw.ef_search)?;
        d.set_item("key_bits", c.key_bits)?;
        d.set_item("segments", m.segments)?;
        d.set_item("sealed_vectors", m.sealed_vectors)?;
        d.set_item("format", m.format)?;
        d.set_item("generation", m.generation)?;
        Ok(d)
    }

    /// Rebuilds the bloom filter over every live key (written with the
    /// next commit); returns the number of keys.
    fn rebuild_bloom(&self, py: Python<'_>) -> PyResult<usize> {
        let c = self.coll()?;
        Ok(py.detach(|| c.rebuild_bloom()))
    }

    /// Adds new keys (same input forms as :meth:`Index.add`). The batch is
    /// validated whole first; a bad row or a key already present raises
    /// ``ValueError`` and nothing is written.
    fn add(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.write(py, keys, vectors, WriteKind::Add).map(|_| ())
    }

    /// Adds the keys not already present; returns how many were added.
    fn add_once(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        self.write(py, keys, vectors, WriteKind::AddOnce)
    }

    /// Inserts or replaces vectors (within one batch the last row of a key
    /// wins). ``payload`` gives typed columns stored with the vectors, one
    /// row per key: a dict of columns (numpy arrays or lists), a pandas
    /// DataFrame or a pyarrow Table (int, float, bool, string, timestamp and
    /// list-of-string columns; nulls allowed). New columns join the schema
    /// (older rows read them as null); a column whose type differs from the
    /// schema's raises :class:`PayloadError` and nothing is written. A
    /// replaced key's old payload goes with its old vector.
    ///
    /// With ``vectors=None`` on a collection created with ``embed_model``,
    /// the engine embeds each row's text (the first text field, a column
    /// of ``payload``).
    #[pyo3(signature = (keys, vectors, payload = None))]
    fn upsert(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        payload: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.upsert_impl(py, keys, vectors, payload)
    }

    /// Deletes keys, or every vector whose payload passes ``where`` (a
    /// filter expression, see :meth:`search`); returns how many were
    /// present.
    #[pyo3(signature = (keys = None, *, r#where = None))]
    fn remove(
        &self,
        py: Python<'_>,
        keys: Option<&Bound<'_, PyAny>>,
        r#where: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        self.remove_impl(py, keys, r#where)
    }

    /// Sets payload columns of stored rows, leaving their other columns
    /// and their vectors as they are: ``set_payload(keys, payload)`` with
    /// one row per key (columns as :meth:`upsert` takes them; a null clears
    /// a value), ``set_payload(keys, values={...})`` with one value per
    /// column for every key, or ``set_payload(where=..., values={...})``
    /// for every row passing a filter. New columns join the schema; under
    /// an embedding model a row whose embedded text changes is embedded
    /// again. A key that is not stored raises :class:`KeyError` and nothing
    /// is written (a key given twice takes its last row). Returns the rows
    /// updated.
    #[pyo3(signature = (keys = None, payload = None, *, r#where = None, values = None))]
    fn set_payload(
        &self,
        py: Python<'_>,
        keys: Option<&Bound<'_, PyAny>>,
        payload: Option<&Bound<'_, PyAny>>,
        r#where: Option<&Bound<'_, PyAny>>,
        values: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        self.set_payload_impl(py, keys, payload, r#where, values)
    }

    /// The payload schema: ``{column: type}`` in column order, types among
    /// ``int64 float64 bool string timestamp tags``.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for f in self.coll()?.schema().fields() {
            d.set_item(&f.name, f.ty.name())?;
        }
        Ok(d)
    }

    /// The live keys whose payload passes ``where`` (all live keys when
    /// ``None``) with their payload ``columns`` (all when ``None``), as a
    /// pyarrow Table whose first column is ``key``.
    #[pyo3(signature = (r#where = None, columns = None))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        r#where: Option<&Bound<'py, PyAny>>,
        columns: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.scan_impl(py, r#where, columns)
    }

    /// The ``k`` nearest neighbours over every segment, merged exactly by
    /// distance (ties by key); same arguments and result as
    /// :meth:`Index.search`.
    ///
    /// ``where`` keeps only vectors whose payload passes a filter
    /// expression: a dict such as ``{"and": [{"field": "lang", "op": "eq",
    /// "value": "en"}, {"field": "year", "op": "ge", "value": 2020}]}``, a
    /// list of conditions (ANDed) or the same as JSON text (docs/API.md).
    /// A search never returns fewer than ``k`` matches when ``k`` vectors
    /// pass. ``columns`` (a list of names, or ``True`` for all) attaches
    /// the matches' payload as ``result.payload``, a pyarrow Table with one
    /// row per entry of ``result.keys`` (row-major), null where no match.
    ///
    /// ``text`` makes it a text or hybrid search (one query): BM25 over the
    /// text fields alone when no query vector is given (and the collection
    /// has no embedding model), else a dense leg (the vector, or the text
    /// embedded) and a BM25 leg of ``depth`` candidates each (default
    /// ``max(k, 20)``), both under ``filter`` / ``where``, fused by
    /// ``fusion``: ``"alpha"`` (``alpha`` · dense + (1 − ``alpha``) · text
    /// over min-max normalised scores; 1.0 = dense only, 0.0 = text only;
    /// the default, with alpha 0.3), ``"rrf"`` (``rrf_k``, default 60) or
    /// ``"dbsf"``. Returns a :class:`TextSearchResult` with each leg's
    /// score and rank.
    #[pyo3(signature = (queries, k, *, filter = None, r#where = None, columns = None, radius = None, exact = false, expansion = None, nprobe = None, refine = None, threads = None, text = None, fusion = None, alpha = None, rrf_k = None, depth = None))]
    #[allow(clippy::too_many_arguments)]
    fn search(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        k: i64,
        filter: Option<&Bound<'_, PyAny>>,
        r#where: Option<&Bound<'_, PyAny>>,
        columns: Option<&Bound<'_, PyAny>>,
        radius: Option<f64>,
        exact: bool,
        expansion: Option<i64>,
        nprobe: Option<i64>,
        refine: Option<i64>,
        threads: Option<i64>,
        text: Option<String>,
        fusion: Option<&str>,
        alpha: Option<f64>,
        rrf_k: Option<f64>,
        depth: Option<i64>,
    ) -> PyResult<Py<PyAny>> {
        self.search_impl(
            py,
            SearchArgs {
                queries,
                k,
                filter,
                r#where,
                columns,
                radius,
                exact,
                expansion,
                nprobe,
                refine,
                threads,
                text,
                fusion,
                alpha,
                rrf_k,
                depth,
            },
        )
    }

    /// The stored vector of each key, or ``None`` (as :meth:`Index.get`).
    /// With ``payload=True`` (or ``columns=[...]``) returns ``(vectors,
    /// table)``: the table is a pyarrow Table with one row per key (all
    /// null for a missing key) of the requested columns (all by default).
    #[pyo3(signature = (keys, *, payload = false, columns = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        payload: bool,
        columns: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.get_impl(py, keys, payload, columns)
    }

    /// Whether each key is present: a bool, or a bool array for many keys.
    /// Absent keys are usually answered by the bloom filter alone.
    fn contains<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.contains_impl(py, keys)
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let c = self.coll()?;
        if wide(&c) {
            return Ok(keys128::scalar(key, "key")
                .ok()
                .flatten()
                .map(|k| c.live_key(&Id::U128(k)))
                .transpose()
                .map_err(store_err)?
                .is_some_and(|l| l.is_some()));
        }
        if !key.is_instance_of::<PyInt>() {
            return Ok(false);
        }
        Ok(key.extract::<u64>().is_ok_and(|k| c.contains(k)))
    }

    /// Live vectors, or those whose payload passes ``where``.
    #[pyo3(signature = (r#where = None))]
    fn count(&self, py: Python<'_>, r#where: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let c = self.coll()?;
        match bind_where(py, &c, r#where)? {
            None => Ok(c.len()),
            Some(f) => py.detach(|| c.count(Some(&f))).map_err(store_err),
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.coll()?.len())
    }

    /// A lazy iterator over every live key (nothing is loaded up front).
    fn keys(&self) -> PyResult<PyCollectionIter> {
        let c = self.coll()?;
        Ok(PyCollectionIter {
            it: Mutex::new(Box::new(c.keys().map(|k| (k, Vec::new())))),
            space: c.config().space,
            items: false,
            wide: wide(&c).then(|| c.clone()),
        })
    }

    /// A lazy iterator over every live ``(key, vector)`` pair, read segment
    /// by segment.
    fn items(&self) -> PyResult<PyCollectionIter> {
        let c = self.coll()?;
        Ok(PyCollectionIter {
            it: Mutex::new(Box::new(c.items())),
            space: c.config().space,
            items: true,
            wide: wide(&c).then(|| c.clone()),
        })
    }

    /// Rewrites sealed segments without deleted vectors and merges small
    /// ones; searches keep working meanwhile.
    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.coll()?;
        py.detach(|| c.compact()).map_err(store_err)
    }

    /// Makes every acknowledged write durable now (fsync of the log).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.coll()?;
        py.detach(|| c.flush()).map_err(store_err)
    }

    /// Writes the mutable part as a segment file now (the background
    /// optimizer indexes it).
    fn seal(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.coll()?;
        py.detach(|| c.seal()).map_err(store_err)
    }

    /// Hands the mutable part to the background optimizer and, with
    /// ``wait=True`` (the default), waits until every row written before
    /// the call is in a built index and merges are done (small segments
    /// into the largest, up to ``max_segment_size``, as the optimizer does
    /// on its own a few seconds after writes pause). Raises
    /// ``OSError`` if background work fails meanwhile (e.g. disk full).
    #[pyo3(signature = (wait = true))]
    fn optimize(&self, py: Python<'_>, wait: bool) -> PyResult<()> {
        let c = self.coll()?;
        if wait {
            py.detach(|| c.optimize()).map_err(store_err)
        } else {
            py.detach(|| c.seal()).map_err(store_err)
        }
    }

    /// Figures: ``segments`` (immutable: sealed and frozen), ``vectors``,
    /// ``active_vectors``, ``unindexed_vectors`` (searched exactly until
    /// the optimizer builds their index), ``tombstones``, ``bytes_on_disk``,
    /// ``bytes_in_memory``, ``bytes_mapped``, ``bloom_fill``,
    /// ``bloom_filters``, ``wal_seq``, and ``optimizer`` (a dict: ``task``,
    /// ``task_rows_done``, ``task_rows_total``, ``tasks_done``,
    /// ``flushes``, ``rows_indexed``, ``errors``, ``last_error``, and
    /// ``deferred``: a ``"build"`` or ``"merge"`` put off until writes
    /// pause, or ``None``).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.coll()?.stats();
        let d = PyDict::new(py);
        d.set_item("segments", s.segments)?;
        d.set_item("vectors", s.vectors)?;
        d.set_item("active_vectors", s.active_vectors)?;
        d.set_item("tombstones", s.tombstones)?;
        d.set_item("bytes_on_disk", s.bytes_on_disk)?;
        d.set_item("bytes_in_memory", s.bytes_in_memory)?;
        d.set_item("bytes_mapped", s.bytes_mapped)?;
        d.set_item("bloom_fill", s.bloom_fill)?;
        d.set_item("bloom_filters", s.bloom_filters)?;
        d.set_item("wal_seq", s.wal_seq)?;
        d.set_item("unindexed_vectors", s.unindexed_vectors)?;
        d.set_item("frozen_segments", s.frozen_segments)?;
        let o = PyDict::new(py);
        o.set_item("task", s.optimizer.task)?;
        o.set_item("task_rows_done", s.optimizer.task_rows_done)?;
        o.set_item("task_rows_total", s.optimizer.task_rows_total)?;
        o.set_item("tasks_done", s.optimizer.tasks_done)?;
        o.set_item("flushes", s.optimizer.flushes)?;
        o.set_item("rows_indexed", s.optimizer.rows_indexed)?;
        o.set_item("errors", s.optimizer.errors)?;
        o.set_item("last_error", s.optimizer.last_error)?;
        o.set_item("deferred", s.optimizer.deferred)?;
        d.set_item("optimizer", o)?;
        Ok(d)
    }

    /// Flushes and closes (releasing the writer lock). Further calls raise
    /// ``ValueError``; closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.inner.write().take();
        if let Some(c) = c {
            py.detach(|| match Arc::try_unwrap(c) {
                // Freezes and writes the mutable part: the next open
                // replays nothing.
                Ok(c) => c.close(),
                Err(c) => c.flush(),
            })
            .map_err(store_err)?;
        }
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// Dimensions.
    #[getter]
    fn ndim(&self) -> PyResult<usize> {
        Ok(self.coll()?.config().space.dims)
    }

    /// HNSW graph degree of the built segments.
    #[getter]
    fn connectivity(&self) -> PyResult<usize> {
        Ok(self.coll()?.config().hnsw.m)
    }

    /// HNSW beam width of the graphs built from now on. Settable on a
    /// writable handle: graphs built afterwards use the new value (built
    /// segments keep theirs); not persisted, a reopen takes the value the
    /// collection was created with.
    #[getter]
    fn expansion_add(&self) -> PyResult<usize> {
        Ok(self.coll()?.expansion_add())
    }

    #[setter]
    fn set_expansion_add(&self, value: i64) -> PyResult<()> {
        let c = self.coll()?;
        let ef = usize::try_from(value).map_err(|_| {
            PyValueError::new_err(format!("expansion_add must be in 1..=65536, got {value}"))
        })?;
        c.set_expansion_add(ef).map_err(store_err)
    }

    /// Default HNSW beam width of a search (``expansion=`` overrides it
    /// per call).
    #[getter]
    fn expansion_search(&self) -> PyResult<usize> {
        Ok(self.coll()?.config().hnsw.ef_search)
    }

    /// Rows under which a segment is kept without a graph and searched by
    /// exact scan (0: every segment gets one); see ``create``.
    #[getter]
    fn index_threshold(&self) -> PyResult<u64> {
        Ok(self.coll()?.config().index_threshold_rows())
    }

    /// Metric name.
    #[getter]
    fn metric(&self) -> PyResult<&'static str> {
        Ok(self.coll()?.config().space.metric.name())
    }

    /// Storage type.
    #[getter]
    fn dtype(&self) -> PyResult<&'static str> {
        Ok(self.coll()?.config().space.dtype.name())
    }

    /// Compact codes of the built graph segments (``"sq8"``, ``"f16"``,
    /// ``"sq16"``; float32 rows kept for the rerank), or ``None``.
    #[getter]
    fn codes(&self) -> PyResult<Option<&'static str>> {
        let c = self.coll()?;
        let cfg = c.config();
        Ok(cfg.keeps_full().then(|| cfg.built_space().dtype.name()))
    }

    /// Whether the collection was opened read-only.
    #[getter]
    fn read_only(&self) -> PyResult<bool> {
        Ok(self.coll()?.mode() == OpenMode::ReadOnly)
    }

    /// The collection's directory.
    #[getter]
    fn path(&self) -> PyResult<PathBuf> {
        Ok(self.coll()?.dir().to_path_buf())
    }

    fn __repr__(&self) -> String {
        match self.inner.read().as_ref() {
            Some(c) => format!(
                "sagitta.Collection({:?}, ndim={}, metric={:?}, len={})",
                c.dir().display().to_string(),
                c.config().space.dims,
                c.config().space.metric.name(),
                c.len()
            ),
            None => "sagitta.Collection(closed)".into(),
        }
    }
}
