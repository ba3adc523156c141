//! The IVF-RaBitQ side of an [`Index`] of kind `IvfRq`: its model and
//! partitions (trained from the first rows), training, export into a
//! segment, search, and appending a row to its partition.

use super::*;

/// The IVF part of an `IvfRq` index. Lock order: `trained` before the
/// store, everywhere.
pub(super) struct IvfState {
    pub(super) params: IvfParams,
    pub(super) nprobe: AtomicUsize,
    pub(super) trained: RwLock<Option<Trained>>,
}

pub(super) struct Trained {
    pub(super) model: Arc<IvfModel>,
    pub(super) lists: Box<[RwLock<List>]>,
}

impl IvfSource for Trained {
    fn model(&self) -> &IvfModel {
        &self.model
    }
    fn with_list(&self, p: usize, f: &mut dyn FnMut(ListRef<'_>)) {
        if let Some(l) = self.lists.get(p) {
            f(l.read().as_ref());
        }
    }
}

/// A copy of a trained IVF index's model and partitions (for writing it
/// into a segment file).
#[derive(Debug, Clone)]
pub struct IvfExport {
    /// Rotation seed, bits and centroids.
    pub model: Arc<IvfModel>,
    /// Per partition: slots, codes, factors, extra-bit planes.
    pub lists: Vec<IvfListData>,
}

/// One partition's arrays (see [`crate::ivf::ListRef`]).
#[derive(Debug, Clone, Default)]
pub struct IvfListData {
    /// Slots in list order.
    pub slots: Vec<u32>,
    /// 1-bit codes, fast-scan blocks.
    pub codes: Vec<u8>,
    /// 4 f32 per vector.
    pub factors: Vec<f32>,
    /// Extra-bit planes.
    pub ex: Vec<u8>,
}

impl Index {
    /// An IVF-RaBitQ index (float dtypes only). Untrained until
    /// [`Index::train`] or the first add, which trains on the vectors it
    /// receives.
    pub fn ivf_rq(space: Space, ivf: IvfParams) -> Result<Self> {
        ivf.validate()?;
        if !matches!(space.dtype, DType::F32 | DType::F16) || space.metric.is_binary() {
            return Err(IndexError::InvalidParameter {
                name: "kind",
                value: "ivf_rq".into(),
                reason: "IVF-RaBitQ needs float vectors (f32 or f16) under l2, ip or cos",
            });
        }
        let mut idx = Self::new(space, IndexKind::Flat, HnswParams::default())?;
        idx.kind = IndexKind::IvfRq;
        idx.ivf = Some(Box::new(IvfState {
            params: ivf,
            nprobe: AtomicUsize::new(ivf.nprobe),
            trained: RwLock::new(None),
        }));
        Ok(idx)
    }

    /// IVF parameters (`None` unless the kind is `IvfRq`), with the current
    /// default nprobe.
    pub fn ivf_params(&self) -> Option<IvfParams> {
        self.ivf.as_ref().map(|s| IvfParams {
            nprobe: s.nprobe.load(Ordering::Relaxed),
            ..s.params
        })
    }

    /// Changes the default nprobe of an IVF index.
    pub fn set_nprobe(&self, nprobe: usize) -> Result<()> {
        let s = self.ivf.as_ref().ok_or(IndexError::InvalidParameter {
            name: "nprobe",
            value: nprobe.to_string(),
            reason: "only IVF indexes have nprobe",
        })?;
        IvfParams { nprobe, ..s.params }.validate()?;
        s.nprobe.store(nprobe, Ordering::Relaxed);
        Ok(())
    }

    /// The trained IVF model, if any.
    pub fn ivf_model(&self) -> Option<Arc<IvfModel>> {
        let s = self.ivf.as_ref()?;
        let t = s.trained.read();
        t.as_ref().map(|t| Arc::clone(&t.model))
    }

    /// Whether the index can search: always for Flat/HNSW, after training
    /// for IVF.
    pub fn is_trained(&self) -> bool {
        self.ivf.as_ref().is_none_or(|s| s.trained.read().is_some())
    }

    /// Trains the IVF coarse quantizer on `sample` (row-major, `dims`
    /// floats per row; rows are validated and normalised for cosine as
    /// vectors are), reporting k-means progress, then encodes every vector
    /// already in the index. Retraining replaces the model.
    pub fn train(&self, sample: &[f32], progress: &mut dyn FnMut(Progress)) -> Result<()> {
        let Some(state) = self.ivf.as_ref() else {
            return Err(IndexError::InvalidParameter {
                name: "kind",
                value: self.kind.name().into(),
                reason: "only IVF indexes are trained",
            });
        };
        let dims = self.space.dims;
        if sample.is_empty() || !sample.len().is_multiple_of(dims) {
            return Err(IndexError::Dimensions {
                expected: dims,
                got: sample.len() % dims.max(1),
            });
        }
        let rows = self.training_rows(sample.chunks_exact(dims).map(VectorRef::F32))?;
        let mut trained = state.trained.write();
        let model = IvfModel::train(&rows, dims, self.space.metric, &state.params, progress)?;
        let t = Trained {
            lists: (0..model.partitions())
                .map(|_| RwLock::new(List::default()))
                .collect(),
            model: Arc::new(model),
        };
        // Encode what is already stored (in slot order, in parallel).
        let store = self.store.read();
        let used = store.used.load(Ordering::Acquire).min(store.capacity());
        let encoded: Vec<(u32, Encoded)> = (0..used as u32)
            .into_par_iter()
            .filter(|&s| store.ready.get(s as usize))
            .map_init(Vec::new, |tmp, slot| {
                let x = self.stored_floats(store.vectors.get(slot as usize));
                let mut e = Encoded::default();
                t.model.encode(&x, tmp, &mut e);
                (slot, e)
            })
            .collect();
        for (slot, e) in &encoded {
            t.lists[e.partition as usize]
                .write()
                .push(&t.model, *slot, e);
        }
        drop(store);
        self.prepare_scratch(&t.model);
        *trained = Some(t);
        Ok(())
    }

    /// Sizes one search scratch per pool thread for `model`, so searches
    /// allocate nothing from the first query on.
    pub(super) fn prepare_scratch(&self, model: &IvfModel) {
        let mut all: Vec<Scratch> = (0..rayon::current_num_threads().max(1))
            .map(|_| self.scratch.take())
            .collect();
        for s in &mut all {
            s.ivf.prepare(model, 256);
            s.query_buf(self.space.stride());
        }
        for s in all {
            self.scratch.give(s);
        }
    }

    /// Validates and encodes rows, returning their stored form as floats
    /// (normalised for cosine, rounded through f16 for f16 storage).
    pub(super) fn training_rows<'a>(
        &self,
        rows: impl Iterator<Item = VectorRef<'a>>,
    ) -> Result<Vec<f32>> {
        let stride = self.space.stride();
        let mut buf = vec![0u8; stride];
        let mut out = Vec::new();
        for (i, v) in rows.enumerate() {
            self.space
                .encode(v, &mut buf)
                .map_err(|e| IndexError::at_row(i, e))?;
            out.extend(self.stored_floats(&buf));
        }
        Ok(out)
    }

    /// A stored vector as the IVF model sees it: unit length under cosine
    /// (rows are stored as given).
    pub(super) fn stored_floats(&self, stored: &[u8]) -> Vec<f32> {
        self.space.model_floats(stored).unwrap_or_default()
    }

    /// A copy of the IVF model and partitions, `None` unless trained.
    pub fn ivf_export(&self) -> Option<IvfExport> {
        let s = self.ivf.as_ref()?;
        let t = s.trained.read();
        let t = t.as_ref()?;
        Some(IvfExport {
            model: Arc::clone(&t.model),
            lists: t
                .lists
                .iter()
                .map(|l| {
                    let l = l.read();
                    IvfListData {
                        slots: l.slots.clone(),
                        codes: l.codes.clone(),
                        factors: l.factors.clone(),
                        ex: l.ex.clone(),
                    }
                })
                .collect(),
        })
    }

    /// Searches into `out` (cleared first), reusing its capacity. For IVF
    /// indexes this performs no heap allocation once the calling thread's
    /// scratch is warm (see the crate's counting-allocator test).
    pub fn search_into(
        &self,
        query: VectorRef<'_>,
        k: usize,
        opts: &SearchOptions<'_>,
        out: &mut Vec<Neighbor>,
    ) -> Result<()> {
        if self.kind != IndexKind::IvfRq || opts.exact {
            let r = self.search(query, k, opts)?;
            out.clear();
            out.extend_from_slice(&r);
            return Ok(());
        }
        let k = self.check_k(k)?;
        if k == 0 {
            out.clear();
            return Ok(());
        }
        let Some(state) = self.ivf.as_ref() else {
            return Err(IndexError::Empty);
        };
        let trained = state.trained.read();
        let Some(t) = trained.as_ref() else {
            return Err(IndexError::Empty);
        };
        let VectorRef::F32(x) = query else {
            return Err(IndexError::WrongInputKind {
                expected: "float",
                dtype: self.space.dtype,
            });
        };
        let mut s = self.scratch.take();
        let stride = self.space.stride();
        if let Err(e) = self.space.encode_query(query, s.query_buf(stride)) {
            self.scratch.give(s);
            return Err(e);
        }
        let q = s.take_query();
        let qb = query_bytes(&q, stride);
        self.space.float_query(x, s.ivf.query_mut(self.space.dims));
        let store = self.store.read();
        let view = Graph {
            store: &store,
            m: self.params.m,
        };
        let result = match opts.filter {
            Some(f) if f.len() > view.slots() => Err(IndexError::FilterSize {
                expected: view.slots(),
                got: f.len(),
            }),
            _ => {
                let iq = IvfQuery {
                    k,
                    nprobe: opts
                        .nprobe
                        .unwrap_or_else(|| state.nprobe.load(Ordering::Relaxed)),
                    refine: opts
                        .refine
                        .unwrap_or_else(|| state.params.default_refine(k)),
                    filter: opts.filter,
                };
                ivf::search(t, &view, &self.dist, qb, iq, &mut s.ivf, out);
                Ok(())
            }
        };
        drop(store);
        s.put_query(q);
        self.scratch.give(s);
        result
    }

    /// Appends a just-written slot to its IVF partition (IVF indexes, once
    /// trained).
    pub(super) fn ivf_append(&self, t: &Trained, slot: u32, stored: &[u8]) {
        let x = self.stored_floats(stored);
        let mut tmp = Vec::new();
        let mut e = Encoded::default();
        t.model.encode(&x, &mut tmp, &mut e);
        t.lists[e.partition as usize]
            .write()
            .push(&t.model, slot, &e);
    }
}
