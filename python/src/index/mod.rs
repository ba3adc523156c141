//! `sagitta.Index`: one in-memory index (Flat or HNSW) or one read-only,
//! memory-mapped segment file, behind the same Python methods.
//!
//! This file holds the class and its methods; beside it: `args` (index
//! arguments from Python), `search` (a batch of queries in parallel),
//! `result` (`SearchResult`), `rows` (stored vectors back to Python) and
//! `threads` (the pools of `threads=N`).

mod args;
mod result;
mod rows;
mod search;
mod threads;

pub(crate) use args::{ivf_overrides, param_err, positive};
pub use result::SearchResult;
pub(crate) use rows::decode_rows;
pub(crate) use threads::{pool, threads_arg};

use crate::convert::{self, NO_KEY, NO_KEY_NAME};
use crate::errors::{index_err, read_only, store_err};
use args::{index_args, ivf_args, rename_param};
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyInt;
use sagitta_index::{
    check_k, Bitset, Index, IndexError, IndexKind, IndexRead, IndexWrite, SearchOptions, Space,
    VectorRef,
};
use sagitta_kernels::{DType, Metric};
use sagitta_store::Segment;
use std::path::PathBuf;

/// Lower-case name of a metric, as the constructor takes it.
pub fn metric_name(m: Metric) -> &'static str {
    m.name()
}

/// Short name of a storage type, as the constructor takes it.
pub fn dtype_name(d: DType) -> &'static str {
    d.name()
}

// One per Python object: the size difference of the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Inner {
    Mem(Index),
    Seg(Segment),
}

/// A vector index: Flat (exact) or HNSW, in memory, or opened read-only
/// from a file written by :meth:`save` (memory-mapped; opening is instant
/// whatever the size).
///
/// Keys are unsigned 64-bit integers (``2**64 - 1`` is reserved as
/// :data:`NO_KEY`). Distances are "smaller is nearer": squared L2,
/// ``1 - dot`` for ``ip``, ``1 - cosine`` for ``cos``, the number of
/// differing bits for ``hamming``, and the fraction of differing bits over
/// the shorter code's prefix for ``nphd``.
///
/// Every heavy call (``add``, ``search``, ``save``, ``open``) releases the
/// GIL; batches use all cores unless ``threads`` says otherwise. An index
/// may be searched from many threads while one or more threads add to it.
#[derive(Debug)]
#[pyclass(name = "Index", module = "sagitta", frozen)]
pub struct PyIndex {
    inner: Inner,
}

impl PyIndex {
    /// Whether full-precision rows are kept beside the stored codes.
    fn keeps_full(&self) -> bool {
        match &self.inner {
            Inner::Mem(i) => i.keeps_full_precision(),
            Inner::Seg(s) => s.has_full_precision(),
        }
    }

    fn read(&self) -> &dyn IndexRead {
        match &self.inner {
            Inner::Mem(i) => i,
            Inner::Seg(s) => s,
        }
    }

    fn mem(&self, op: &str) -> PyResult<&Index> {
        match &self.inner {
            Inner::Mem(i) => Ok(i),
            Inner::Seg(_) => Err(read_only(op)),
        }
    }
}

#[pymethods]
impl PyIndex {
    /// Creates an empty in-memory index.
    ///
    /// ndim: dimensions (bits for ``hamming``; the longest code in bits,
    /// at most 256, for ``nphd``). metric: ``"cos"``, ``"l2"``, ``"ip"``,
    /// ``"hamming"`` or ``"nphd"``. dtype: storage type, ``"f32"``,
    /// ``"f16"``, ``"i8"``, ``"b1"``, or the scalar-quantized ``"sq8"`` /
    /// ``"sq16"`` (any float input; one scale per vector, codes of 1 or 2
    /// bytes per dimension; :meth:`get` returns the dequantized vector).
    /// keep_full: with ``"f16"`` / ``"sq8"`` / ``"sq16"``, also keep each
    /// float32 vector: graph searches traverse the compact codes and
    /// re-score the best ``max(2k, 16)`` of their beam exactly from the float32 rows
    /// (``search(..., refine=N)`` re-scores the best N, ``refine=0``
    /// none), exact searches read only the float32 rows, :meth:`get`
    /// returns them, and saved files carry them memory-mapped, read only
    /// when reranking.
    ///
    /// Default (no ``dtype``): ``"b1"`` for the binary metrics; for
    /// ``kind="hnsw"`` under ``cos`` / ``l2`` / ``ip``, ``"sq8"`` codes
    /// with ``keep_full=True`` (the fastest measured: about twice the
    /// queries per second of float32 traversal at the same recall, with
    /// exact float32 distances; 1.3x the memory of float32 in an index
    /// being built, the float32 rows paged in only for reranks once
    /// saved and opened); ``"f32"`` otherwise or with ``keep_full=False``.
    /// kind: ``"hnsw"``, ``"flat"`` (exact) or ``"ivf_rq"``. connectivity: HNSW links per node (M). expansion_add /
    /// expansion_search: beam widths while adding / searching. seed:
    /// seed of the HNSW level assignment or of the IVF rotation and
    /// k-means (builds are reproducible).
    ///
    /// ``kind="ivf_rq"`` makes an IVF-RaBitQ index (f32 / f16 under l2,
    /// ip or cos): ``bits`` per dimension (1..8: one sign bit plus
    /// ``bits - 1`` extra bits), ``partitions`` (``None``: about one per
    /// 4096 training vectors), default ``nprobe`` and ``refine`` (rerank
    /// depth; ``None`` picks 10k / 4k / 2k / 0 for 1 / 2-3 / 4-6 / 7-8
    /// bits). It must be trained: :meth:`train` on a sample, or the first
    /// :meth:`add` trains on the vectors it receives (so make it a large,
    /// representative batch; a single vector trains one partition).
    #[new]
    #[pyo3(signature = (ndim, metric = "cos", dtype = None, kind = "hnsw", connectivity = 16, expansion_add = 128, expansion_search = 64, seed = None, bits = 1, partitions = None, nprobe = 8, refine = None, keep_full = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        ndim: i64,
        metric: &str,
        dtype: Option<&str>,
        kind: &str,
        connectivity: i64,
        expansion_add: i64,
        expansion_search: i64,
        seed: Option<u64>,
        bits: i64,
        partitions: Option<i64>,
        nprobe: i64,
        refine: Option<i64>,
        keep_full: Option<bool>,
    ) -> PyResult<Self> {
        let (mut space, kind_v, mut params) = index_args(
            ndim,
            metric,
            dtype,
            kind,
            connectivity,
            expansion_add,
            expansion_search,
        )?;
        if let Some(seed) = seed {
            params.seed = seed;
        }
        // The default storage of a float HNSW index: sq8 codes for the
        // graph, float32 rows for the rerank.
        let default_codes =
            dtype.is_none() && kind_v == IndexKind::Hnsw && !space.metric.is_binary();
        let keep_full = match keep_full {
            None if default_codes => {
                space.dtype = DType::Sq8;
                true
            }
            k => k.unwrap_or(false),
        };
        let index = if kind_v == IndexKind::IvfRq {
            let ivf = ivf_args(bits, partitions, nprobe, refine, seed)?;
            Index::ivf_rq(space, ivf).map_err(|e| index_err(rename_param(e), "kind"))?
        } else {
            Index::new(space, kind_v, params)
                .map_err(|e| param_err(e, connectivity, expansion_add, expansion_search))?
        };
        let index = if keep_full {
            index
                .keep_full_precision()
                .map_err(|e| index_err(e, "keep_full"))?
        } else {
            index
        };
        Ok(PyIndex {
            inner: Inner::Mem(index),
        })
    }

    /// Opens an index file written by :meth:`save`, memory-mapped and
    /// read-only. Only the header and section table are read, so opening
    /// takes the same time for any size; vectors are paged in as searches
    /// touch them. Raises ``FileNotFoundError`` / ``OSError`` for I/O
    /// errors and :class:`CorruptFileError` for damaged or foreign files.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let seg = py.detach(|| Segment::open(&path)).map_err(store_err)?;
        Ok(PyIndex {
            inner: Inner::Seg(seg),
        })
    }

    /// Writes the index to ``path`` durably (written to ``path.tmp``,
    /// fsynced, renamed into place, directory fsynced), so a crash leaves
    /// either the old file or the complete new one.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| match &self.inner {
            Inner::Mem(i) => Segment::write(i, &path).map(|_| ()),
            Inner::Seg(s) => s.copy_to(&path),
        })
        .map_err(store_err)
    }

    /// Adds vectors under new keys.
    ///
    /// keys: one int, or a 1-D array-like of non-negative ints. vectors:
    /// one vector (1-D) or a 2-D array, one row per key; float indexes take
    /// any numeric dtype (float32 C-contiguous arrays are read without a
    /// copy), ``hamming`` takes uint8 packed bits (or bool bits), ``nphd``
    /// takes ``bytes`` or a list of them. threads: ``None`` uses every core.
    ///
    /// The batch is validated first: wrong dimensions, NaN / inf, a key
    /// already present or repeated in the batch raise ``ValueError`` naming
    /// the row, and nothing is added.
    #[pyo3(signature = (keys, vectors, *, threads = None))]
    fn add(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        threads: Option<i64>,
    ) -> PyResult<()> {
        let index = self.mem("add")?;
        let threads = threads_arg(threads)?;
        let keys = convert::keys(keys, "keys")?;
        let rows = convert::rows(vectors, &index.space(), "vectors")?;
        convert::check_write_keys(&keys.keys, rows.len(), &NO_KEY, NO_KEY_NAME)?;
        let refs = rows.refs();
        let single = rows.single() && keys.single;
        py.detach(|| index.add_batch(&keys.keys, &refs, threads))
            .map_err(|e| match e {
                IndexError::Row { source, .. } if single => index_err(*source, "vectors"),
                e => index_err(e, "vectors"),
            })
    }

    /// Inserts or replaces vectors (within one batch the last row of a key
    /// wins). The batch is validated first (wrong dimensions, NaN / inf
    /// raise ``ValueError`` naming the row) and nothing changes on an
    /// error; then the keys present are removed and the rows added.
    #[pyo3(signature = (keys, vectors, *, threads = None))]
    fn upsert(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        threads: Option<i64>,
    ) -> PyResult<()> {
        let index = self.mem("upsert")?;
        let threads = threads_arg(threads)?;
        let keys = convert::keys(keys, "keys")?;
        let space = index.space();
        let rows = convert::rows(vectors, &space, "vectors")?;
        convert::check_write_keys(&keys.keys, rows.len(), &NO_KEY, NO_KEY_NAME)?;
        let refs = rows.refs();
        let single = rows.single() && keys.single;
        let err = |e: IndexError| match e {
            IndexError::Row { source, .. } if single => index_err(*source, "vectors"),
            e => index_err(e, "vectors"),
        };
        // Validate every row before anything is removed.
        let mut buf = vec![0u8; space.stride()];
        for (row, v) in refs.iter().enumerate() {
            space
                .encode(*v, &mut buf)
                .map_err(|e| err(IndexError::at_row(row, e)))?;
        }
        // The last row of each key.
        let mut last = std::collections::HashMap::with_capacity(keys.keys.len());
        for (i, &k) in keys.keys.iter().enumerate() {
            last.insert(k, i);
        }
        let mut pick: Vec<usize> = last.into_values().collect();
        pick.sort_unstable();
        let ks: Vec<u64> = pick.iter().map(|&i| keys.keys[i]).collect();
        let vs: Vec<_> = pick.iter().map(|&i| refs[i]).collect();
        py.detach(|| {
            for &k in &ks {
                index.remove(k);
            }
            index.add_batch(&ks, &vs, threads)
        })
        .map_err(err)
    }

    /// Trains an IVF index's coarse quantizer (k-means) on ``sample``
    /// (a 2-D float array, validated like :meth:`add`), then encodes every
    /// vector already added. ``partitions=None`` at construction means
    /// ``len(sample) / 4096``: pass ``partitions`` when the sample is a
    /// subset. progress: print each k-means iteration to stderr.
    #[pyo3(signature = (sample, *, progress = false, threads = None))]
    fn train(
        &self,
        py: Python<'_>,
        sample: &Bound<'_, PyAny>,
        progress: bool,
        threads: Option<i64>,
    ) -> PyResult<()> {
        let index = self.mem("train")?;
        if index.kind() != IndexKind::IvfRq {
            return Err(PyValueError::new_err(format!(
                "train: only ivf_rq indexes are trained (this one is {})",
                index.kind().name()
            )));
        }
        let threads = threads_arg(threads)?;
        let rows = convert::rows(sample, &index.space(), "sample")?;
        let mut flat: Vec<f32> = Vec::new();
        for r in rows.refs() {
            if let VectorRef::F32(x) = r {
                flat.extend_from_slice(x);
            }
        }
        let run = || {
            index.train(&flat, &mut |p| {
                if progress {
                    eprintln!("sagitta: {p}");
                }
            })
        };
        py.detach(|| {
            if threads == 0 {
                run()
            } else {
                match pool(threads) {
                    Ok(p) => p.install(run),
                    Err(_) => run(),
                }
            }
        })
        .map_err(|e| index_err(e, "sample"))
    }

    /// Finds the ``k`` nearest neighbours of each query.
    ///
    /// queries: one vector (1-D) or a 2-D array (same input forms as
    /// :meth:`add`). k: neighbours per query, 1 to 10000; past
    /// ``len(index)`` the result holds every vector (``counts`` says how
    /// many), and an empty index answers none (the one rule of every
    /// search, index or collection). filter: an array-like of keys; only those keys may
    /// be returned (keys not in the index are ignored). radius: only
    /// matches with distance <= radius are returned. exact: scan every
    /// vector instead of walking the graph. expansion: beam width for this
    /// call (default :attr:`expansion_search`; at least ``k`` is used).
    /// nprobe / refine (``ivf_rq``): partitions probed and rerank depth
    /// for this call (``refine=0`` returns estimated distances).
    /// threads: ``None`` uses every core for a batch.
    ///
    /// Returns a :class:`SearchResult`.
    #[pyo3(signature = (queries, k, *, filter = None, radius = None, exact = false, expansion = None, nprobe = None, refine = None, threads = None))]
    #[allow(clippy::too_many_arguments)]
    fn search(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        k: i64,
        filter: Option<&Bound<'_, PyAny>>,
        radius: Option<f64>,
        exact: bool,
        expansion: Option<i64>,
        nprobe: Option<i64>,
        refine: Option<i64>,
        threads: Option<i64>,
    ) -> PyResult<SearchResult> {
        let (nprobe, refine) = ivf_overrides(nprobe, refine)?;
        let r = self.read();
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| k > 0)
            .ok_or_else(|| PyValueError::new_err(format!("k: must be at least 1, got {k}")))?;
        check_k(k, r.len()).map_err(|e| index_err(e, "queries"))?;
        if radius.is_some_and(f64::is_nan) {
            return Err(PyValueError::new_err("radius: must be a number, got nan"));
        }
        let radius = radius.map(|x| x as f32);
        let ef = expansion.map(|e| positive("expansion", e)).transpose()?;
        let threads = threads_arg(threads)?;
        let allowed = filter.map(|f| convert::keys(f, "filter")).transpose()?;
        let rows = convert::rows(queries, &r.space(), "queries")?;
        let single = rows.single();
        let refs = rows.refs();
        let (keys_out, dist_out, counts) = py
            .detach(|| {
                let bitset: Option<Bitset> = allowed.as_ref().map(|a| r.filter_for_keys(&a.keys));
                let opts = SearchOptions {
                    ef,
                    filter: bitset.as_ref(),
                    exact,
                    nprobe,
                    refine,
                    snapshot: false,
                };
                search::batch(r, &refs, k, &opts, radius, single, threads)
            })
            .map_err(|e| index_err(e, "queries"))?;
        SearchResult::new(py, keys_out, dist_out, counts, k, single)
    }

    /// The stored vector of each key, or ``None`` for a key not in the
    /// index (never garbage).
    ///
    /// One key gives one value; an array of keys gives a list. Vectors come
    /// back in their stored form: float32 / float16 / int8 numpy arrays
    /// (``cos`` indexes store unit-length vectors; ``i8`` under ``cos``
    /// stores them scaled to [-127, 127]), uint8 packed bits for
    /// ``hamming``, ``bytes`` for ``nphd``.
    fn get<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let keys = convert::keys(keys, "keys")?;
        let r = self.read();
        let space = r.space();
        if self.keeps_full() {
            // Full-precision rows: float32, as given (unit length under cos).
            let found: Vec<Option<Vec<u8>>> = py.detach(|| {
                keys.keys
                    .iter()
                    .map(|&k| {
                        r.get(k)
                            .map(|v| v.iter().flat_map(|x| x.to_ne_bytes()).collect())
                    })
                    .collect()
            });
            let f32_space = Space {
                dtype: DType::F32,
                ..space
            };
            return decode_rows(py, f32_space, found, keys.single);
        }
        let found: Vec<Option<Vec<u8>>> =
            py.detach(|| keys.keys.iter().map(|&k| r.get_raw(k)).collect());
        decode_rows(py, space, found, keys.single)
    }

    /// Whether each key is in the index: a bool for one key, a bool array
    /// for an array of keys.
    fn contains<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let keys = convert::keys(keys, "keys")?;
        let r = self.read();
        let hits: Vec<bool> = py.detach(|| keys.keys.iter().map(|&k| r.contains(k)).collect());
        if keys.single {
            Ok(pyo3::types::PyBool::new(py, hits[0]).to_owned().into_any())
        } else {
            Ok(PyArray1::from_vec(py, hits).into_any())
        }
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        if !key.is_instance_of::<PyInt>() {
            return Ok(false);
        }
        Ok(key.extract::<u64>().is_ok_and(|k| self.read().contains(k)))
    }

    /// Removes keys; returns how many were present. Missing keys are
    /// ignored. The space of removed vectors is not reused.
    fn remove(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<usize> {
        let index = self.mem("remove")?;
        let keys = convert::keys(keys, "keys")?;
        Ok(py.detach(|| keys.keys.iter().filter(|&&k| index.remove(k)).count()))
    }

    fn __len__(&self) -> usize {
        self.read().len()
    }

    /// Dimensions (bits for binary metrics).
    #[getter]
    fn ndim(&self) -> usize {
        self.read().space().dims
    }

    /// Metric name: ``"cos"``, ``"l2"``, ``"ip"``, ``"hamming"`` or ``"nphd"``.
    #[getter]
    fn metric(&self) -> &'static str {
        metric_name(self.read().space().metric)
    }

    /// Storage type of the searched vectors: ``"f32"``, ``"f16"``,
    /// ``"i8"``, ``"b1"``, ``"sq8"`` or ``"sq16"``.
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.read().space().dtype)
    }

    /// Whether float32 rows are kept beside the stored codes for an exact
    /// rerank (the default for float HNSW indexes).
    #[getter]
    fn keep_full(&self) -> bool {
        self.keeps_full()
    }

    /// ``"hnsw"`` or ``"flat"``.
    #[getter]
    fn kind(&self) -> &'static str {
        let kind = match &self.inner {
            Inner::Mem(i) => i.kind(),
            Inner::Seg(s) => s.info().kind,
        };
        kind.name()
    }

    /// HNSW links per node (M); 0 for a flat index, which has no graph.
    #[getter]
    fn connectivity(&self) -> usize {
        match &self.inner {
            Inner::Mem(i) if i.kind() != IndexKind::Hnsw => 0,
            Inner::Mem(i) => i.params().m,
            Inner::Seg(s) => s.info().m as usize,
        }
    }

    /// Beam width used while adding (ef_construction).
    #[getter]
    fn expansion_add(&self) -> usize {
        match &self.inner {
            Inner::Mem(i) => i.params().ef_construction,
            Inner::Seg(s) => s.info().ef_construction as usize,
        }
    }

    /// Default beam width of searches (ef_search); settable at any time,
    /// also on an opened file (not persisted there).
    #[getter]
    fn expansion_search(&self) -> usize {
        match &self.inner {
            Inner::Mem(i) => i.ef_search(),
            Inner::Seg(s) => s.ef_search(),
        }
    }

    #[setter]
    fn set_expansion_search(&self, ef: i64) -> PyResult<()> {
        let ef = positive("expansion_search", ef)?;
        match &self.inner {
            Inner::Mem(i) => i
                .set_ef_search(ef)
                .map_err(|e| index_err(rename_param(e), "")),
            Inner::Seg(s) => s.set_ef_search(ef).map_err(store_err),
        }
    }

    /// Bytes the index occupies: heap memory for an in-memory index; for
    /// an opened file, the mapped file size (an upper bound of what is
    /// resident), except ``ivf_rq`` files, where it is what searches keep
    /// resident (codes, factors, lists, centroids: the vectors are read
    /// only to rerank).
    #[getter]
    fn memory_usage(&self) -> usize {
        match &self.inner {
            Inner::Mem(i) => i.memory_usage(),
            Inner::Seg(s) if s.info().kind == IndexKind::IvfRq => s.ivf_resident_bytes(),
            Inner::Seg(s) => s.info().file_len as usize,
        }
    }

    /// Whether the index can search: always, except an ``ivf_rq`` index
    /// that has been neither trained nor added to.
    #[getter]
    fn is_trained(&self) -> bool {
        match &self.inner {
            Inner::Mem(i) => i.is_trained(),
            Inner::Seg(_) => true,
        }
    }

    /// RaBitQ bits per dimension of an ``ivf_rq`` index, else ``None``.
    #[getter]
    fn bits(&self) -> Option<u8> {
        match &self.inner {
            Inner::Mem(i) => i.ivf_params().map(|p| p.bits),
            Inner::Seg(s) => s.info().ivf.map(|i| i.bits),
        }
    }

    /// Partitions of a trained ``ivf_rq`` index, else ``None``.
    #[getter]
    fn partitions(&self) -> Option<usize> {
        match &self.inner {
            Inner::Mem(i) => i.ivf_model().map(|m| m.partitions()),
            Inner::Seg(s) => s.info().ivf.map(|i| i.partitions as usize),
        }
    }

    /// Default partitions probed per query (``ivf_rq``), else ``None``;
    /// settable.
    #[getter]
    fn nprobe(&self) -> Option<usize> {
        match &self.inner {
            Inner::Mem(i) => i.ivf_params().map(|p| p.nprobe),
            Inner::Seg(s) => s.nprobe(),
        }
    }

    #[setter]
    fn set_nprobe(&self, nprobe: i64) -> PyResult<()> {
        let n = positive("nprobe", nprobe)?;
        match &self.inner {
            Inner::Mem(i) => i.set_nprobe(n).map_err(|e| index_err(e, "nprobe")),
            Inner::Seg(s) => s.set_nprobe(n).map_err(store_err),
        }
    }

    /// Whether the index was opened from a file (and cannot change).
    #[getter]
    fn read_only(&self) -> bool {
        matches!(self.inner, Inner::Seg(_))
    }

    /// The file an opened index maps, or ``None``.
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        match &self.inner {
            Inner::Mem(_) => None,
            Inner::Seg(s) => Some(s.path().to_path_buf()),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "sagitta.Index(ndim={}, metric={:?}, dtype={:?}, kind={:?}, len={}{})",
            self.ndim(),
            self.metric(),
            self.dtype(),
            self.kind(),
            self.__len__(),
            if self.read_only() {
                ", read_only=True"
            } else {
                ""
            }
        )
    }
}
