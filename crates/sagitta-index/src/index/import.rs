//! [`Index::from_graph`]'s work: an index built from any [`GraphView`]
//! by copying its slots, vectors, keys, levels and links as they are.

use super::*;

impl Index {
    pub(super) fn import<G: GraphView + ?Sized>(
        space: Space,
        params: HnswParams,
        src: &G,
        keep: &dyn Fn(u32) -> bool,
        extra_capacity: usize,
        with_full: bool,
    ) -> Result<Index> {
        params.validate()?;
        let dist = space.distance()?;
        let (m, m0, stride) = (params.m, params.m0(), space.stride());
        // Entry point before the slot count: an index growing concurrently
        // then has its entry among the slots seen.
        let src_entry = src.entry_point();
        let n = src.slots();
        // An HNSW graph with live nodes always has an entry point (a Flat
        // index or segment has none, nor any links).
        if src_entry.is_none() && (0..n as u32).any(|s| src.is_live(s)) {
            return Err(IndexError::InvalidParameter {
                name: "src",
                value: format!("{n} slots"),
                reason: "the source has live slots but no entry point (not an HNSW graph)",
            });
        }
        let capacity = n
            .checked_add(extra_capacity)
            .filter(|&c| c <= MAX_SLOTS)
            .ok_or(IndexError::Full(MAX_SLOTS))?
            .max(INITIAL_CAPACITY);
        let too_long = || IndexError::InvalidParameter {
            name: "m",
            value: m.to_string(),
            reason: "the source graph has longer neighbour lists than this m allows \
                     (params.m must match the source's)",
        };
        // Copies `items` (ids below `n` only) into a `[count, n..]` record.
        // Plain stores through `&mut`: nothing is shared yet.
        let copy_list = |rec: &mut [AtomicU32], items: &[u32]| -> Result<()> {
            let Some((count, body)) = rec.split_first_mut() else {
                return Err(too_long());
            };
            if items.len() > body.len() {
                return Err(too_long());
            }
            let mut c = 0;
            for &x in items {
                if (x as usize) < n {
                    *body[c].get_mut() = x;
                    c += 1;
                }
            }
            *count.get_mut() = c as u32;
            Ok(())
        };

        let mut store = Store::new(&space, capacity, None);
        // Full-precision rows travel with the graph when the source has
        // them (every slot or none).
        let fstride = (space.dims * 4).next_multiple_of(crate::VECTOR_ALIGN);
        if with_full && n > 0 && src.full(0).is_some() {
            store.full = Some(SlotBuf::new(fstride, capacity));
        }
        let mut links = Links::new(capacity, m0);
        let mut keymap =
            KeyMap::with_capacity_and_hasher(n.saturating_add(extra_capacity), Default::default());
        let mut live = 0usize;
        // The first slot of the highest level: the entry point should the
        // source name none usable.
        let mut highest: Option<(u32, usize)> = None;
        let mut buf: Vec<u32> = Vec::with_capacity(m0 + 1);
        let stride0 = links.stride0;
        let Links {
            level0,
            upper,
            levels,
            ..
        } = &mut links;
        let rows = level0
            .chunks_exact_mut(stride0)
            .zip(upper.iter_mut().zip(levels.iter_mut()))
            .take(n);
        for (slot, (rec0, (up, lvl))) in (0u32..).zip(rows) {
            let s = slot as usize;
            let v = src.vector(slot);
            let Some(v) = v.get(..stride) else {
                return Err(IndexError::InvalidParameter {
                    name: "src",
                    value: format!("slot {slot}: {} stored bytes", v.len()),
                    reason: "a source vector is shorter than the space's stride",
                });
            };
            // SAFETY: `store` was created above and is owned by this
            // function alone: no other thread can read or write any slot
            // of it, and each slot is written exactly once.
            unsafe { store.vectors.write(s, v) };
            if let Some(full) = &store.full {
                let Some(row) = src.full(slot).and_then(|r| r.get(..space.dims * 4)) else {
                    return Err(IndexError::InvalidParameter {
                        name: "src",
                        value: format!("slot {slot}"),
                        reason: "the source keeps full-precision rows but not for every slot",
                    });
                };
                // SAFETY: as for the vectors above.
                unsafe { full.write(s, row) };
            }
            let key = src.key(slot);
            *store.keys[s].get_mut() = key;

            src.neighbors(0, slot, &mut buf);
            copy_list(rec0, &buf)?;
            let level = src.level(slot).min(MAX_LEVEL);
            *lvl.get_mut() = level as u8;
            if level > 0 {
                let mut lists: Box<[AtomicU32]> =
                    (0..level * (1 + m)).map(|_| AtomicU32::new(0)).collect();
                for (l, rec) in (1..=level).zip(lists.chunks_exact_mut(1 + m)) {
                    src.neighbors(l, slot, &mut buf);
                    copy_list(rec, &buf)?;
                }
                *up = OnceLock::from(lists);
            }
            if highest.is_none_or(|(_, h)| level > h) {
                highest = Some((slot, level));
            }

            if src.is_live(slot) && keep(slot) {
                if keymap.insert(key, slot).is_some() {
                    return Err(IndexError::DuplicateKey(key));
                }
                live += 1;
            } else {
                store.deleted.set(s);
            }
            store.ready.set(s);
        }
        let entry = match src_entry {
            Some((e, top)) if (e as usize) < n => Some((e, top.min(MAX_LEVEL))),
            _ => highest,
        };
        *links.entry.get_mut() = entry;
        *store.used.get_mut() = n;
        store.links = Some(links);
        Ok(Index {
            space,
            kind: IndexKind::Hnsw,
            params,
            ef_search: AtomicUsize::new(params.ef_search),
            dist,
            store: RwLock::new(store),
            keymap: Mutex::new(keymap),
            live: AtomicUsize::new(live),
            scratch: ScratchPool::default(),
            ivf: None,
        })
    }
}
