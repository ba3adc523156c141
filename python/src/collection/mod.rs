//! `sagitta.Collection`: a durable, sharded collection on a directory.

use crate::convert::{self, NO_KEY, NO_KEY_NAME};
use crate::errors::{index_err, store_err};
use crate::index::{
    decode_rows, index_args, ivf_args, ivf_overrides, param_err, pool, positive, threads_arg,
    SearchResult,
};
use crate::keys128::{self, NO_KEY128};
use crate::text;
use numpy::PyArray1;
use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyTuple};
use sagitta_index::{IndexError, Space};
use sagitta_store::filter::Bound as FilterBound;
use sagitta_store::payload;
use sagitta_store::{
    Answer, Collection, CollectionOptions, CollectionSearch, Filter, Id, IdColumn, IdType, IdWrite,
    OpenMode, Payload, Query, StoreError, TextFieldOption,
};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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

/// A lazy iterator over a collection's keys or (key, vector) pairs.
#[pyclass(name = "CollectionIterator", module = "sagitta", frozen)]
pub struct PyCollectionIter {
    it: Mutex<Box<dyn Iterator<Item = (u64, Vec<u8>)> + Send>>,
    space: Space,
    items: bool,
    /// The collection, when its keys are 128-bit ids to look up.
    wide: Option<Arc<Collection>>,
}

impl std::fmt::Debug for PyCollectionIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyCollectionIter")
            .field("items", &self.items)
            .finish()
    }
}

#[pymethods]
impl PyCollectionIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let next = py.detach(|| self.it.lock().unwrap_or_else(|e| e.into_inner()).next());
        let Some((key, v)) = next else {
            return Err(PyStopIteration::new_err(()));
        };
        let key = match &self.wide {
            None => key.into_pyobject(py)?.into_any(),
            Some(c) => match py.detach(|| c.ids_of(&[key])).map_err(store_err)?.pop() {
                Some(Some(Id::U128(v))) => v.into_pyobject(py)?.into_any(),
                _ => key.into_pyobject(py)?.into_any(),
            },
        };
        if !self.items {
            return Ok(key);
        }
        let vector = decode_rows(py, self.space, vec![Some(v)], true)?;
        Ok(PyTuple::new(py, [key, vector])?.into_any())
    }
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
    /// size (default 1 GiB). durability:
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
    #[pyo3(signature = (path, *, ndim, metric = "cos", dtype = None, kind = "hnsw", segment_size = 64 << 20, max_segment_size = 1 << 30, durability = "batch", key_bits = 64, connectivity = 16, expansion_add = 128, expansion_search = 64, bits = 1, partitions = None, nprobe = 8, refine = None, codes = None, text_fields = None, embed_model = None, bm25_k1 = None, bm25_b = None, index_threshold = None))]
    #[allow(clippy::too_many_arguments)]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        ndim: i64,
        metric: &str,
        dtype: Option<&str>,
        kind: &str,
        segment_size: u64,
        max_segment_size: u64,
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
            max_segment_size: Some(max_segment_size),
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
        let payload = payload
            .filter(|p| !p.is_none())
            .map(|p| payload_arg(py, p))
            .transpose()?;
        if vectors.is_none() {
            let c = self.coll()?;
            if wide(&c) {
                return Err(PyValueError::new_err(
                    "vectors: None (embedding) is not supported with 128-bit keys yet",
                ));
            }
            let keys = convert::keys(keys, "keys")?;
            let p = payload.ok_or_else(|| {
                PyValueError::new_err("vectors: None needs a payload with the text to embed")
            })?;
            return py
                .detach(|| c.upsert_embedding(&keys.keys, &p))
                .map_err(store_err);
        }
        self.write(py, keys, vectors, WriteKind::Upsert(payload))
            .map(|_| ())
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
        let c = self.coll()?;
        match (keys, bind_where(py, &c, r#where)?) {
            (Some(keys), None) => {
                let keys = self.key_arg(py, &c, keys, "keys")?.known();
                py.detach(|| c.remove(&keys)).map_err(store_err)
            }
            (None, Some(f)) => py.detach(|| c.remove_where(&f)).map_err(store_err),
            _ => Err(PyValueError::new_err(
                "remove: give either keys or where=, not both",
            )),
        }
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
        let c = self.coll()?;
        let payload = payload
            .filter(|p| !p.is_none())
            .map(|p| payload_arg(py, p))
            .transpose()?;
        let values = values
            .filter(|v| !v.is_none())
            .map(|v| values_arg(py, &c, v))
            .transpose()?;
        let filter = bind_where(py, &c, r#where)?;
        match (keys.filter(|k| !k.is_none()), filter, payload, values) {
            (Some(keys), None, Some(p), None) => {
                let keys = self.stored_keys(py, &c, keys)?;
                py.detach(|| c.set_payload(&keys, &p)).map_err(store_err)
            }
            (Some(keys), None, None, Some(v)) => {
                let keys = self.stored_keys(py, &c, keys)?;
                let p = v.select(&vec![0; keys.len()]);
                py.detach(|| c.set_payload(&keys, &p)).map_err(store_err)
            }
            (None, Some(f), None, Some(v)) => {
                py.detach(|| c.set_payload_where(&f, &v)).map_err(store_err)
            }
            _ => Err(PyValueError::new_err(
                "set_payload: give keys with payload= (one row per key) or with values= \
                 (one value per column, for every key), or where= with values=",
            )),
        }
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
        let c = self.coll()?;
        let f = bind_where(py, &c, r#where)?;
        let (keys, batch) = py
            .detach(|| {
                let keys = c.keys_where(f.as_ref())?;
                let batch = c.payload_table(&keys, columns.as_deref())?;
                Ok((keys, batch))
            })
            .map_err(store_err)?;
        let table = arrow_table(py, &batch)?;
        helpers(py)?.call_method1("with_keys", (table, PyArray1::from_vec(py, keys)))
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
        let c = self.coll()?;
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| k > 0)
            .ok_or_else(|| PyValueError::new_err(format!("k: must be at least 1, got {k}")))?;
        // Translated into the store's Query (Python ints to unsigned
        // ones); the store checks it: k's limit, the knobs, text-only
        // settings without a text, a NaN radius.
        let fusion = text::fusion_arg(fusion, alpha, rrf_k)?;
        let depth = depth.map(|d| positive("depth", d)).transpose()?;
        if let Some(text) = text {
            let ef = expansion.map(|e| positive("expansion", e)).transpose()?;
            let (nprobe, refine) = ivf_overrides(nprobe, refine)?;
            if wide(&c) {
                return Err(PyValueError::new_err(
                    "text: text searches are not supported with 128-bit keys yet",
                ));
            }
            let allowed = filter.map(|f| convert::keys(f, "filter")).transpose()?;
            let predicate = bind_where(py, &c, r#where)?;
            let columns = columns_arg(columns)?;
            let opts = CollectionSearch {
                ef,
                exact,
                filter: allowed.as_ref().map(|a| a.keys.as_slice()),
                predicate: predicate.as_ref(),
                radius: radius.map(|r| r as f32),
                nprobe,
                refine,
            };
            let (keys, r) = text::search(py, &c, Some(queries), &text, k, fusion, depth, opts)?;
            let r = match columns {
                None => r,
                Some(cols) => {
                    let batch = py
                        .detach(|| c.payload_table(&keys, cols.as_deref()))
                        .map_err(store_err)?;
                    text::with_payload(py, r, arrow_table(py, &batch)?.unbind())?
                }
            };
            return Ok(r.into_any());
        }
        let ef = expansion.map(|e| positive("expansion", e)).transpose()?;
        let (nprobe, refine) = ivf_overrides(nprobe, refine)?;
        let threads = threads_arg(threads)?;
        let allowed = filter
            .map(|f| self.key_arg(py, &c, f, "filter").map(KeyArg::known))
            .transpose()?;
        let predicate = bind_where(py, &c, r#where)?;
        let columns = columns_arg(columns)?;
        let rows = convert::rows(queries, &c.config().space, "queries")?;
        let single = rows.single();
        let refs = rows.refs();
        let n = refs.len();
        let opts = CollectionSearch {
            ef,
            exact,
            filter: allowed.as_deref(),
            predicate: predicate.as_ref(),
            radius: radius.map(|r| r as f32),
            nprobe,
            refine,
        };
        let q = Query {
            fusion,
            depth,
            opts,
            ..Query::dense(refs, k)
        };
        let run = || match c.query(&q)? {
            Answer::Dense(found) => Ok(found),
            Answer::Fused(_) => Err(StoreError::InvalidQuery("not a dense query".into())),
        };
        let found = py
            .detach(|| {
                if threads == 0 {
                    run()
                } else {
                    match pool(threads) {
                        Ok(p) => p.install(run),
                        Err(_) => run(),
                    }
                }
            })
            .map_err(|e| match e {
                StoreError::Index(IndexError::Row { source, .. }) if single => {
                    index_err(*source, "queries")
                }
                StoreError::Index(e) => index_err(e, "queries"),
                e => store_err(e),
            })?;
        let mut keys_out = vec![NO_KEY; n * k];
        let mut dist_out = vec![f32::INFINITY; n * k];
        let mut counts = vec![0i64; n];
        for (i, row) in found.iter().enumerate() {
            for (j, nb) in row.iter().enumerate().take(k) {
                keys_out[i * k + j] = nb.key;
                dist_out[i * k + j] = nb.distance;
            }
            counts[i] = row.len().min(k) as i64;
        }
        let table = match columns {
            None => None,
            Some(cols) => {
                let batch = py
                    .detach(|| c.payload_table(&keys_out, cols.as_deref()))
                    .map_err(store_err)?;
                Some(arrow_table(py, &batch)?.unbind())
            }
        };
        let wide_keys = if wide(&c) {
            let ids = py.detach(|| c.ids_of(&keys_out)).map_err(store_err)?;
            let ids: Vec<u128> = ids
                .into_iter()
                .map(|id| match id {
                    Some(Id::U128(v)) => v,
                    _ => NO_KEY128,
                })
                .collect();
            let shape: Vec<usize> = if single { vec![k] } else { vec![n, k] };
            Some(keys128::array128(py, &ids, &shape)?.unbind())
        } else {
            None
        };
        let r = SearchResult::new(py, keys_out, dist_out, counts, k, single)?;
        let r = match wide_keys {
            Some(keys) => r.with_keys(keys),
            None => r,
        };
        Ok(Py::new(
            py,
            match table {
                Some(t) => r.with_payload(t),
                None => r,
            },
        )?
        .into_any())
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
        let c = self.coll()?;
        let keys = self.key_arg(py, &c, keys, "keys")?;
        let flat = &keys.keys;
        let found: Vec<Option<Vec<u8>>> = py.detach(|| {
            let mut found = c.get_raw_many(flat);
            if let Some(live) = &keys.live {
                for (f, &l) in found.iter_mut().zip(live) {
                    if !l {
                        *f = None;
                    }
                }
            }
            found
        });
        let vectors = decode_rows(py, c.config().space, found, keys.single)?;
        if !payload && columns.is_none() {
            return Ok(vectors);
        }
        let batch = py
            .detach(|| c.payload_table(flat, columns.as_deref()))
            .map_err(store_err)?;
        let table = arrow_table(py, &batch)?;
        Ok(PyTuple::new(py, [vectors, table])?.into_any())
    }

    /// Whether each key is present: a bool, or a bool array for many keys.
    /// Absent keys are usually answered by the bloom filter alone.
    fn contains<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.coll()?;
        let keys = self.key_arg(py, &c, keys, "keys")?;
        let hits: Vec<bool> = match keys.live {
            Some(live) => live,
            None => py.detach(|| c.contains_many(&keys.keys)),
        };
        if keys.single {
            Ok(pyo3::types::PyBool::new(py, hits[0]).to_owned().into_any())
        } else {
            Ok(PyArray1::from_vec(py, hits).into_any())
        }
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

#[derive(Debug)]
enum WriteKind {
    Add,
    AddOnce,
    Upsert(Option<Payload>),
}

/// The `sagitta._payload` helper module (pyarrow conversions).
fn helpers(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("sagitta._payload")
}

/// A Python payload (dict, DataFrame, pyarrow Table or IPC bytes) read
/// into columns.
fn payload_arg(py: Python<'_>, p: &Bound<'_, PyAny>) -> PyResult<Payload> {
    let bytes: Vec<u8> = helpers(py)?.call_method1("to_ipc", (p,))?.extract()?;
    py.detach(|| Payload::from_ipc(&bytes))
        .map_err(|e| store_err(e.into()))
}

/// `values=` of `set_payload`: one row. Columns of the schema are read
/// by its types (as a JSON upsert's); new ones are typed by pyarrow, as an
/// upsert's payload.
fn values_arg(py: Python<'_>, c: &Collection, v: &Bound<'_, PyAny>) -> PyResult<Payload> {
    let schema = c.schema();
    let known: Vec<String> = schema.fields().iter().map(|f| f.name.clone()).collect();
    let (text, new): (String, Bound<'_, PyAny>) = helpers(py)?
        .call_method1("split_values", (v, known))?
        .extract()?;
    let obj: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| PyValueError::new_err(format!("values: {e}")))?;
    let mut p = Payload::from_json_rows(&[obj], &schema).map_err(|e| store_err(e.into()))?;
    if new.len()? > 0 {
        let added = payload_arg(py, &new)?;
        if added.rows != 1 {
            return Err(PyValueError::new_err("values: one value per column"));
        }
        p.fields.extend(added.fields);
        p.columns.extend(added.columns);
    }
    Ok(p)
}

/// A `where=` argument parsed and checked against the schema.
fn bind_where(
    py: Python<'_>,
    c: &Collection,
    w: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<FilterBound>> {
    let Some(w) = w.filter(|w| !w.is_none()) else {
        return Ok(None);
    };
    let text: String = helpers(py)?.call_method1("filter_json", (w,))?.extract()?;
    let f = Filter::from_json(&text).map_err(|e| store_err(e.into()))?;
    c.bind_filter(&f).map(Some).map_err(store_err)
}

/// `text_fields=`: a list of names (English analyzer) or a dict of name →
/// analyzer.
fn text_fields_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<TextFieldOption>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(d) = v.cast::<PyDict>() {
        return d
            .iter()
            .map(|(k, a)| {
                Ok(TextFieldOption {
                    name: k.extract()?,
                    analyzer: Some(a.extract()?),
                })
            })
            .collect();
    }
    if v.extract::<String>().is_ok() {
        return Err(PyValueError::new_err(
            "text_fields: expected a list of column names or a dict {name: analyzer}, not a string",
        ));
    }
    Ok(v.extract::<Vec<String>>()
        .map_err(|_| {
            PyValueError::new_err(
                "text_fields: expected a list of column names or a dict {name: analyzer}",
            )
        })?
        .into_iter()
        .map(TextFieldOption::named)
        .collect())
}

/// `columns=`: `True` for all, a list of names, `False` / `None` for none.
fn columns_arg(cols: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Option<Vec<String>>>> {
    let Some(cols) = cols.filter(|c| !c.is_none()) else {
        return Ok(None);
    };
    if let Ok(b) = cols.extract::<bool>() {
        return Ok(b.then_some(None));
    }
    cols.extract::<Vec<String>>()
        .map(|v| Some(Some(v)))
        .map_err(|_| PyValueError::new_err("columns: expected True or a list of column names"))
}

/// An Arrow record batch as a pyarrow Table.
fn arrow_table<'py>(
    py: Python<'py>,
    batch: &arrow_array::RecordBatch,
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = payload::ipc_bytes(batch).map_err(|e| store_err(e.into()))?;
    helpers(py)?.call_method1("from_ipc", (PyBytes::new(py, &bytes),))
}

/// Whether `c` has 128-bit keys.
fn wide(c: &Collection) -> bool {
    c.id_type() == IdType::UInt128
}

/// Keys given to a lookup, as the store looks them up.
struct KeyArg {
    /// 64-bit keys: as given. 128-bit ids: the key of each live one,
    /// [`NO_KEY`] for the others.
    keys: Vec<u64>,
    /// 128-bit ids only: whether each is live (its stored id checked, so
    /// an id never answers for another with the same 64-bit key).
    live: Option<Vec<bool>>,
    /// Whether a single key was given.
    single: bool,
}

impl KeyArg {
    /// The keys that may be live (every 64-bit key; live 128-bit ids).
    fn known(self) -> Vec<u64> {
        match self.live {
            None => self.keys,
            Some(live) => self
                .keys
                .into_iter()
                .zip(live)
                .filter_map(|(k, l)| l.then_some(k))
                .collect(),
        }
    }
}

impl PyCollection {
    /// Reads keys given to a lookup: 64-bit keys as they are, 128-bit ids
    /// resolved through the collection's id check.
    fn key_arg(
        &self,
        py: Python<'_>,
        c: &Arc<Collection>,
        keys: &Bound<'_, PyAny>,
        arg: &str,
    ) -> PyResult<KeyArg> {
        if !wide(c) {
            let k = convert::keys(keys, arg)?;
            return Ok(KeyArg {
                keys: k.keys,
                live: None,
                single: k.single,
            });
        }
        let k = keys128::keys128(keys, arg)?;
        let ids: Vec<Id> = k.keys.iter().map(|&v| Id::U128(v)).collect();
        let found = py.detach(|| c.live_keys(&ids)).map_err(store_err)?;
        Ok(KeyArg {
            keys: found.iter().map(|l| l.unwrap_or(NO_KEY)).collect(),
            live: Some(found.iter().map(Option::is_some).collect()),
            single: k.single,
        })
    }

    /// Keys of rows to update: every one must be stored (a 128-bit id
    /// that is not raises :class:`KeyError` here; a 64-bit key, in the
    /// store).
    fn stored_keys(
        &self,
        py: Python<'_>,
        c: &Arc<Collection>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<u64>> {
        let k = self.key_arg(py, c, keys, "keys")?;
        if let Some(row) = k.live.as_ref().and_then(|l| l.iter().position(|&x| !x)) {
            return Err(pyo3::exceptions::PyKeyError::new_err(format!(
                "row {row}: key is not in the collection (nothing written)"
            )));
        }
        Ok(k.keys)
    }

    /// [`PyCollection::write`] with 128-bit keys.
    fn write128(
        &self,
        py: Python<'_>,
        c: &Arc<Collection>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        kind: WriteKind,
    ) -> PyResult<usize> {
        let keys = keys128::keys128(keys, "keys")?;
        let rows = convert::rows(vectors, &c.config().space, "vectors")?;
        convert::check_write_keys(&keys.keys, rows.len(), &NO_KEY128, "2**128 - 1")?;
        let single = rows.single() && keys.single;
        let refs = rows.refs();
        let ids = IdColumn::U128(keys.keys);
        let n = refs.len();
        py.detach(|| match &kind {
            WriteKind::Add => c.write_ids(&ids, &refs, None, IdWrite::Add).map(|_| n),
            WriteKind::AddOnce => c
                .write_ids(&ids, &refs, None, IdWrite::AddOnce)
                .map(|k| k.len()),
            WriteKind::Upsert(p) => c
                .write_ids(&ids, &refs, p.as_ref(), IdWrite::Upsert)
                .map(|_| n),
        })
        .map_err(|e| match e {
            StoreError::Index(IndexError::Row { source, .. }) if single => {
                index_err(*source, "vectors")
            }
            e => store_err(e),
        })
    }

    fn write(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        kind: WriteKind,
    ) -> PyResult<usize> {
        let c = self.coll()?;
        if wide(&c) {
            return self.write128(py, &c, keys, vectors, kind);
        }
        let keys = convert::keys(keys, "keys")?;
        let rows = convert::rows(vectors, &c.config().space, "vectors")?;
        convert::check_write_keys(&keys.keys, rows.len(), &NO_KEY, NO_KEY_NAME)?;
        let single = rows.single() && keys.single;
        let refs = rows.refs();
        py.detach(|| match &kind {
            WriteKind::Add => c.add(&keys.keys, &refs).map(|()| refs.len()),
            WriteKind::AddOnce => c.add_once(&keys.keys, &refs),
            WriteKind::Upsert(p) => c
                .upsert_with_payload(&keys.keys, &refs, p.as_ref())
                .map(|()| refs.len()),
        })
        .map_err(|e| match e {
            StoreError::Index(IndexError::Row { source, .. }) if single => {
                index_err(*source, "vectors")
            }
            e => store_err(e),
        })
    }
}
