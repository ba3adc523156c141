//! Writes into an [`Index`]: capacity, levels, inserts and HNSW linking
//! (a node is reachable only once every level of it can be walked),
//! upserts of encoded rows and batches, batch validation.

use super::*;

impl Index {
    /// Makes room for `additional` more slots without growing later.
    pub fn reserve(&self, additional: usize) -> Result<()> {
        let want = self.slot_count().saturating_add(additional);
        self.grow_to(want)
    }

    pub(super) fn grow_to(&self, want: usize) -> Result<()> {
        if want > MAX_SLOTS {
            return Err(IndexError::Full(MAX_SLOTS));
        }
        let mut store = self.store.write();
        if store.capacity() >= want {
            return Ok(());
        }
        let cap = want.max(store.capacity() * 2).min(MAX_SLOTS);
        *store = store.grown(cap, self.params.m0());
        Ok(())
    }

    pub(super) fn level_for(&self, slot: usize) -> usize {
        // splitmix64 of (seed, slot) → uniform in (0, 1] → geometric level.
        let mut z = self.params.seed ^ (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let ml = 1.0 / (self.params.m as f64).ln();
        ((-u.ln() * ml) as usize).min(MAX_LEVEL)
    }

    /// Claims a slot for `key` (and tombstones its previous slot when
    /// `replace`), growing the index if needed.
    pub(super) fn insert(&self, key: u64, v: VectorRef<'_>, replace: bool) -> Result<()> {
        let mut scratch = self.scratch.take();
        let stride = self.space.stride();
        scratch.full.clear();
        // The full-precision row of an index keeping them (codes of f16,
        // sq8 or sq16): the vector as given, whatever the metric.
        if let (VectorRef::F32(x), DType::F16 | DType::Sq8 | DType::Sq16) = (v, self.space.dtype) {
            scratch.full.extend_from_slice(x);
        }
        let r = self
            .space
            .encode(v, scratch.query_buf(stride))
            .and_then(|()| self.insert_encoded(key, &mut scratch, Naming::of(replace)));
        self.scratch.give(scratch);
        r.map(|_| ())
    }

    pub(super) fn insert_encoded(
        &self,
        key: u64,
        scratch: &mut Scratch,
        naming: Naming,
    ) -> Result<u32> {
        let replace = naming != Naming::Add;
        // IVF: hold the model for the whole insert (so training, which
        // takes it exclusively, sees every slot either before or after),
        // training first on this one vector when nothing trained it yet.
        let mut ivf = self.ivf.as_ref().map(|s| s.trained.read());
        if ivf.as_ref().is_some_and(|g| g.is_none()) {
            drop(ivf.take());
            let stride = self.space.stride();
            let q = scratch.take_query();
            let rows = self.stored_floats(query_bytes(&q, stride));
            scratch.put_query(q);
            if !self.is_trained() {
                self.train(&rows, &mut |_| {})?;
            }
            ivf = self.ivf.as_ref().map(|s| s.trained.read());
        }
        let trained = ivf.as_ref().and_then(|g| g.as_ref());
        loop {
            let store = self.store.read();
            let claimed = {
                let keymap = self.keymap.lock();
                let old = keymap.get(&key).copied();
                if old.is_some() && !replace {
                    return Err(IndexError::DuplicateKey(key));
                }
                let slot = store.used.load(Ordering::Acquire);
                if slot >= store.capacity() {
                    None
                } else {
                    store.used.store(slot + 1, Ordering::Release);
                    // The key names the new slot only once it is ready
                    // (below): until then a replaced key keeps its old
                    // slot, so readers never find it missing.
                    Some((slot, old))
                }
            };
            let Some((slot, old)) = claimed else {
                let cap = store.capacity();
                drop(store);
                self.grow_to(cap + 1)?;
                continue;
            };
            let q = scratch.take_query();
            let qb = query_bytes(&q, self.space.stride());
            store.keys[slot].store(key, Ordering::Release);
            // SAFETY: `slot` was claimed above under the key-map lock by
            // this thread alone and is not yet reachable by any reader.
            unsafe { store.vectors.write(slot, qb) };
            if let Some(full) = &store.full {
                let bytes: Vec<u8> = scratch.full.iter().flat_map(|x| x.to_ne_bytes()).collect();
                // SAFETY: as above: the slot is this thread's alone.
                unsafe { full.write(slot, &bytes) };
            }
            if let Some(links) = &store.links {
                let g = Graph {
                    store: &store,
                    m: self.params.m,
                };
                // The walk compares the new vector as a query: at unit
                // length under cosine over f32 (it is stored as given).
                let unit = self.space.stored_as_query(qb);
                let walk = unit.as_deref().map_or(qb, crate::plan::f32_bytes);
                self.link(&g, links, slot as u32, walk, scratch);
            }
            if let Some(t) = trained {
                self.ivf_append(t, slot as u32, qb);
            }
            scratch.put_query(q);
            // Publish: the key names the new slot, and its previous one
            // (the one at the claim, or a newer one another thread
            // finished meanwhile) is dead, retired before the new one is
            // ready so no search sees both. A key removed meanwhile leaves
            // the new slot dead too; one added meanwhile by a
            // non-replacing insert is a duplicate.
            if naming == Naming::Staged {
                // Ready (reachable, so the graph stays whole) but named
                // by no key until [`Index::publish`].
                store.ready.set(slot);
                return Ok(slot as u32);
            }
            let mut keymap = self.keymap.lock();
            let r = match (keymap.get(&key).copied(), old) {
                (Some(cur), _) if replace => {
                    store.deleted.set(cur as usize);
                    keymap.insert(key, slot as u32);
                    Ok(slot as u32)
                }
                (Some(_), _) => {
                    store.deleted.set(slot);
                    Err(IndexError::DuplicateKey(key))
                }
                (None, Some(_)) => {
                    store.deleted.set(slot);
                    Ok(slot as u32)
                }
                (None, None) => {
                    keymap.insert(key, slot as u32);
                    self.live.fetch_add(1, Ordering::AcqRel);
                    Ok(slot as u32)
                }
            };
            store.ready.set(slot);
            return r;
        }
    }

    pub(super) fn link(
        &self,
        view: &Graph<'_>,
        links: &Links,
        slot: u32,
        q: &[u8],
        s: &mut Scratch,
    ) {
        let m = self.params.m;
        let level = self.level_for(slot as usize);
        links.levels[slot as usize].store(level as u8, Ordering::Release);
        if level > 0 {
            let lists: Box<[AtomicU32]> = (0..level * (1 + m)).map(|_| AtomicU32::new(0)).collect();
            let _ = links.upper[slot as usize].set(lists);
        }
        // Inserting above the current top takes the entry lock for the
        // whole insert (rare: ~1/M of nodes reach level 1).
        let mut entry_guard = None;
        let entry = {
            let e = *links.entry.read();
            match e {
                Some((_, top)) if level <= top => e,
                _ => {
                    let g = links.entry.write();
                    let e = *g;
                    entry_guard = Some(g);
                    e
                }
            }
        };
        let Some((ep, top)) = entry else {
            if let Some(mut g) = entry_guard {
                *g = Some((slot, level));
            }
            return;
        };
        let dist = &self.dist;
        let mut cur = Cand {
            dist: dist.eval(q, view.vector(ep)),
            slot: ep,
        };
        let mut neigh = std::mem::take(&mut s.neighbors);
        for l in (level + 1..=top).rev() {
            cur = graph::greedy(view, dist, q, cur, l, &mut neigh);
        }
        s.neighbors = neigh;
        // Write all of the new node's own lists first and only then the
        // reverse links: the node becomes reachable from the graph only
        // once every one of its levels can be walked.
        let mut eps = vec![cur];
        let mut chosen: Vec<(usize, Vec<u32>)> = Vec::with_capacity(level.min(top) + 1);
        for l in (0..=level.min(top)).rev() {
            graph::search_layer(
                view,
                dist,
                q,
                &eps,
                self.params.ef_construction,
                l,
                s,
                |x| x != slot,
            );
            let mut cands = std::mem::take(&mut s.pool);
            cands.clear();
            cands.extend(s.results.drain());
            cands.sort_unstable();
            let mut selected = Vec::with_capacity(m);
            graph::select_neighbors(view, dist, &cands, m, &mut selected);
            if let Some(list) = links.list(l, slot, m) {
                let _g = links.locks[slot as usize].lock();
                write_list(list, &selected);
            }
            chosen.push((l, selected));
            eps.clear();
            eps.extend_from_slice(&cands);
            s.pool = cands;
        }
        for (l, selected) in chosen {
            let max = if l == 0 { self.params.m0() } else { m };
            for n in selected {
                self.add_link(view, links, n, slot, l, max, s);
            }
        }
        if let Some(mut g) = entry_guard {
            if level > top {
                *g = Some((slot, level));
            }
        }
    }

    /// Adds `new` to `node`'s list at `level`, shrinking with the heuristic
    /// when full.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_link(
        &self,
        view: &Graph<'_>,
        links: &Links,
        node: u32,
        new: u32,
        level: usize,
        max: usize,
        s: &mut Scratch,
    ) {
        let Some(list) = links.list(level, node, self.params.m) else {
            return;
        };
        let _g = links.locks[node as usize].lock();
        let mut cur = std::mem::take(&mut s.neighbors);
        read_list(list, &mut cur);
        if cur.contains(&new) {
            s.neighbors = cur;
            return;
        }
        if cur.len() < max {
            let at = cur.len() + 1;
            list[at].store(new, Ordering::Release);
            list[0].store(at as u32, Ordering::Release);
        } else {
            let base = view.vector(node);
            cur.push(new);
            let mut d = Vec::with_capacity(cur.len());
            if self.dist.wants_unit_query() {
                // The node's stored vector is no unit-length query.
                d.extend(
                    cur.iter()
                        .map(|&n| self.dist.eval_pair(base, view.vector(n))),
                );
            } else {
                graph::eval_slots(view, &self.dist, base, &cur, &mut d);
            }
            let mut cands: Vec<Cand> = cur
                .iter()
                .zip(&d)
                .map(|(&slot, &dist)| Cand { dist, slot })
                .collect();
            cands.sort_unstable();
            let mut keep = Vec::with_capacity(max);
            graph::select_neighbors(view, &self.dist, &cands, max, &mut keep);
            write_list(list, &keep);
        }
        s.neighbors = cur;
    }

    /// Inserts or replaces `key` with a vector already in stored form (as
    /// written by [`Space::encode`]: `stored.len()` is the space's
    /// `vector_bytes()` or `stride()`). Used to replay logs and to copy
    /// vectors between segments without decoding them.
    pub fn upsert_encoded(&self, key: u64, stored: &[u8]) -> Result<()> {
        let (vb, stride) = (self.space.vector_bytes(), self.space.stride());
        if self.keeps_full_precision() {
            return Err(IndexError::InvalidParameter {
                name: "stored",
                value: "quantized row".into(),
                reason: "an index keeping full precision needs float input (add / upsert)",
            });
        }
        if stored.len() != vb && stored.len() != stride {
            return Err(IndexError::Dimensions {
                expected: vb,
                got: stored.len(),
            });
        }
        let mut scratch = self.scratch.take();
        let r = self.encoded_row(key, stored, &mut scratch, Naming::Replace);
        self.scratch.give(scratch);
        r.map(|_| ())
    }

    /// [`Index::upsert_encoded`]'s insert with the given naming.
    fn encoded_row(
        &self,
        key: u64,
        stored: &[u8],
        scratch: &mut Scratch,
        naming: Naming,
    ) -> Result<u32> {
        let (vb, stride) = (self.space.vector_bytes(), self.space.stride());
        let buf = scratch.query_buf(stride);
        buf.fill(0);
        buf[..vb].copy_from_slice(&stored[..vb]);
        self.insert_encoded(key, scratch, naming)
    }

    /// [`Index::upsert_encoded`] for many keys in parallel (`threads` as
    /// in [`Index::add_batch`]); `stored` holds one `stride()`-long row per
    /// key.
    pub fn upsert_encoded_batch(&self, keys: &[u64], stored: &[u8], threads: usize) -> Result<()> {
        let stride = self.prepare_batch(keys, stored, threads)?;
        let run = || {
            keys.par_iter()
                .zip(stored.par_chunks_exact(stride.max(1)))
                .try_for_each(|(&k, v)| {
                    crate::sched::foreground::step();
                    self.upsert_encoded(k, v)
                })
        };
        with_threads(if keys.len() < 64 { 0 } else { threads }, run)
    }

    /// Checks a batch of stored rows (one stride-long row per key), trains
    /// an untrained IVF index on them, and makes room for every row.
    /// Returns the stride.
    fn prepare_batch(&self, keys: &[u64], stored: &[u8], threads: usize) -> Result<usize> {
        let stride = self.space.stride();
        if stored.len() != keys.len() * stride {
            return Err(IndexError::InvalidParameter {
                name: "stored",
                value: stored.len().to_string(),
                reason: "must hold one stride-long row per key",
            });
        }
        if !self.is_trained() && !keys.is_empty() {
            let rows: Vec<f32> = stored
                .chunks_exact(stride)
                .flat_map(|r| self.stored_floats(r))
                .collect();
            with_threads(threads, || self.train(&rows, &mut |_| {}))?;
        }
        self.reserve(keys.len())?;
        Ok(stride)
    }

    /// Inserts a batch like [`Index::upsert_encoded_batch`], but names
    /// none of its keys: each row gets a new slot, ready to be walked and
    /// scanned, while every key keeps the slot it had (or stays absent)
    /// and [`Index::len`] is unchanged, until [`Index::publish`] names the
    /// new slots all at once. A caller that bounds its readers to the
    /// slots below [`Index::slot_count`] as it was before the batch
    /// (everything earlier is published) thus sees the whole batch or
    /// none of it, and never a key without a slot. Rows are staged in
    /// batch order of their slots; on an error the rows staged so far
    /// are dead and nothing is named. Writes into one index are not
    /// interleaved with a staged batch (the caller serialises them).
    pub fn stage_encoded_batch(
        &self,
        keys: &[u64],
        stored: &[u8],
        threads: usize,
    ) -> Result<Staged> {
        if self.keeps_full_precision() {
            return Err(IndexError::InvalidParameter {
                name: "stored",
                value: "quantized row".into(),
                reason: "an index keeping full precision needs float input (add / upsert)",
            });
        }
        let stride = self.prepare_batch(keys, stored, threads)?;
        let run = || {
            keys.par_iter()
                .zip(stored.par_chunks_exact(stride.max(1)))
                .map(|(&k, v)| {
                    crate::sched::foreground::step();
                    let mut scratch = self.scratch.take();
                    let r = self.encoded_row(k, v, &mut scratch, Naming::Staged);
                    self.scratch.give(scratch);
                    r
                })
                .collect::<Vec<Result<u32>>>()
        };
        let slots = with_threads(if keys.len() < 64 { 0 } else { threads }, || Ok(run()))?;
        let mut staged = Staged {
            rows: Vec::with_capacity(keys.len()),
        };
        let mut failed = None;
        for (&k, r) in keys.iter().zip(slots) {
            match r {
                Ok(slot) => staged.rows.push((k, slot)),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            None => Ok(staged),
            Some(e) => {
                self.abandon(staged);
                Err(e)
            }
        }
    }

    /// Names the slots of a staged batch ([`Index::stage_encoded_batch`]),
    /// in batch order (a key staged twice ends on its last row): each key
    /// now names its new slot and its previous slot, if any, is dead.
    pub fn publish(&self, staged: Staged) {
        let store = self.store.read();
        let mut keymap = self.keymap.lock();
        for (key, slot) in staged.rows {
            match keymap.insert(key, slot) {
                Some(old) => _ = store.deleted.set(old as usize),
                None => _ = self.live.fetch_add(1, Ordering::AcqRel),
            }
        }
    }

    /// Drops a staged batch: its slots are dead, no key changes.
    pub fn abandon(&self, staged: Staged) {
        let store = self.store.read();
        for (_, slot) in staged.rows {
            store.deleted.set(slot as usize);
        }
    }

    /// Upserts rows given as f32 bytes (`row_stride` bytes per key, the
    /// first `dims × 4` of them the components, native byte order: the
    /// stored form of an f32 space or a full-precision row): each is
    /// encoded as a user vector would be. Used to build an index with
    /// codes and full rows from f32 rows (`threads` as in
    /// [`Index::add_batch`]).
    pub fn upsert_f32_rows(
        &self,
        keys: &[u64],
        rows: &[u8],
        row_stride: usize,
        threads: usize,
    ) -> Result<()> {
        let dims = self.space.dims;
        if row_stride < dims * 4 || rows.len() != keys.len() * row_stride {
            return Err(IndexError::InvalidParameter {
                name: "rows",
                value: rows.len().to_string(),
                reason: "must hold one row of at least dims f32 per key",
            });
        }
        self.reserve(keys.len())?;
        let run = || {
            keys.par_iter()
                .zip(rows.par_chunks_exact(row_stride))
                .try_for_each(|(&k, r)| {
                    crate::sched::foreground::step();
                    let v = f32_row(r, dims);
                    self.upsert(k, VectorRef::F32(&v))
                })
        };
        with_threads(if keys.len() < 64 { 0 } else { threads }, run)
    }

    /// Checks a batch without changing the index: one key per vector,
    /// every vector valid for the space, no key repeated within the batch
    /// or already present. The error names the first offending row
    /// ([`IndexError::Row`]).
    pub fn validate_batch(&self, keys: &[u64], vectors: &[VectorRef<'_>]) -> Result<()> {
        if keys.len() != vectors.len() {
            return Err(IndexError::InvalidParameter {
                name: "keys",
                value: keys.len().to_string(),
                reason: "must have one key per vector",
            });
        }
        let stride = self.space.stride();
        let bad = vectors
            .par_iter()
            .enumerate()
            .map_init(
                || vec![0u8; stride],
                |buf, (i, v)| {
                    crate::sched::foreground::step();
                    self.space.encode(*v, buf).err().map(|e| (i, e))
                },
            )
            .flatten()
            .min_by_key(|(i, _)| *i);
        if let Some((i, e)) = bad {
            return Err(IndexError::at_row(i, e));
        }
        let mut seen: HashMap<u64, (), BuildHasherDefault<KeyHasher>> =
            HashMap::with_capacity_and_hasher(keys.len(), Default::default());
        let keymap = self.keymap.lock();
        for (i, &k) in keys.iter().enumerate() {
            if seen.insert(k, ()).is_some() || keymap.contains_key(&k) {
                return Err(IndexError::at_row(i, IndexError::DuplicateKey(k)));
            }
        }
        Ok(())
    }

    /// Adds many vectors using up to `threads` threads (all cores when 0).
    /// The batch is validated first ([`Index::validate_batch`]): a bad row
    /// or a duplicate key rejects the whole batch and nothing is added.
    /// (Concurrent writers adding the same keys at the same time can still
    /// make a later row fail with [`IndexError::DuplicateKey`].)
    pub fn add_batch(&self, keys: &[u64], vectors: &[VectorRef<'_>], threads: usize) -> Result<()> {
        self.validate_batch(keys, vectors)?;
        if !self.is_trained() && !vectors.is_empty() {
            let rows = self.training_rows(vectors.iter().copied())?;
            with_threads(threads, || self.train(&rows, &mut |_| {}))?;
        }
        self.reserve(keys.len())?;
        let run = || {
            keys.par_iter()
                .zip(vectors.par_iter())
                .try_for_each(|(&k, &v)| self.add(k, v))
        };
        with_threads(threads, run)
    }

    /// `k` under the one rule ([`crate::limits::check_k`]): 0 when the
    /// index holds no live row.
    pub(super) fn check_k(&self, k: usize) -> Result<usize> {
        crate::limits::check_k(k, self.len())
    }
}

/// How an insert names its key's new slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Naming {
    /// A key already present is [`IndexError::DuplicateKey`].
    Add,
    /// The key names the new slot; its previous one dies.
    Replace,
    /// No key names the slot yet ([`Index::stage_encoded_batch`]).
    Staged,
}

impl Naming {
    fn of(replace: bool) -> Naming {
        if replace {
            Naming::Replace
        } else {
            Naming::Add
        }
    }
}

/// Rows inserted by [`Index::stage_encoded_batch`] and not yet named:
/// (key, slot) in batch order. Hand it to [`Index::publish`] or
/// [`Index::abandon`]; dropped, its slots stay unnamed and live to a walk
/// (a caller that bounds its readers by slot never sees them).
#[derive(Debug, Default)]
#[must_use = "publish or abandon a staged batch"]
pub struct Staged {
    rows: Vec<(u64, u32)>,
}

impl Staged {
    /// The (key, slot) of each row, in batch order.
    pub fn rows(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.rows.iter().copied()
    }

    /// Rows staged.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether nothing was staged.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}
