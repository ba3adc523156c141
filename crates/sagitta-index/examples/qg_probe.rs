//! Probe for issue 60's "graph over compact codes stored with the links"
//! (SymphonyQG-style): is a walk that scores a node's whole neighbourhood
//! from 1-bit codes kept in the node's own record faster, at the same
//! recall, than the default index's walk (sq8 codes of each neighbour,
//! f32 re-scoring)?
//!
//! `qg_probe BASE.f32.npy QUERIES.f32.npy GT.npy [PASSES]` (the harness's
//! cached debian-minilm: `~/.cache/sagitta-bench/debian-minilm/`). Builds
//! the default index (sq8 + f32 rows, M 16, ef_construction 128), then
//! from its level-0 graph one record per node: its neighbours' ids, their
//! 1-bit RaBitQ codes of the residual *to the node* in the fast-scan block
//! layout with three factors each, and the node's rotated vector (sq8). Both walks run one query at a time on this thread over the same
//! queries, passes alternating; prints recall@10 and QPS per beam.
//! Results and reading: bench/results/journal-2026-12.md, "Neighbour codes
//! stored with the links". Knobs (environment): `QG_ONLY=EF` times the
//! probe's walk alone at one beam (for a profiler); `QG_NODE=f32` keeps the
//! node's vector as f32 in its record (sq8 by default, re-scored from f32
//! rows); `QG_AHEAD=N` prefetches the records of the heap's first N entries
//! (1); `QG_PF=N` the first N lines of each besides the node's vector (8);
//! `QG_HUGE=1` asks for 2 MiB pages for the records; `QG_POOL=1` walks
//! with one sorted pool of `ef` entries (NSG-style) instead of two heaps.
//!
//! The estimate: with every vector rotated (an orthogonal map keeps
//! distances), `r = v - u` the residual of neighbour `v` to node `u` and
//! `x = sign(r) / sqrt(D)` its code, `|q - v|² = |q - u|² + |r|² - 2<q - u,
//! r>` and `<q - u, r> ≈ |r| (<q, x> - <u, x>) / <x, r/|r|>` (RaBitQ's
//! estimator). `<u, x>`, `|r|²` and `|r| / <x, r/|r|>` are stored per
//! neighbour, so one lookup table of the query serves every node, and
//! `|q - u|²` is the node's exact distance, computed when it is expanded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sagitta_index::rotation::Rotation;
use sagitta_index::{
    DType, GraphView, HnswParams, Index, IndexRead, Metric, SearchOptions, Space, VectorRef,
};
use sagitta_kernels::fastscan::set_block_nibble;
use sagitta_kernels::{kernels, prefetch};
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::Instant;

/// Links per node on level 0 (2 M): one fast-scan block.
const SLOTS: usize = 32;

fn npy(path: &str) -> (Vec<usize>, Vec<u8>, String) {
    let b = std::fs::read(path).expect("read npy");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let h = std::str::from_utf8(&b[10..10 + hlen]).unwrap().to_string();
    let descr = h.split("'descr': '").nth(1).unwrap()[..3].to_string();
    let shape: Vec<usize> = h
        .split('(')
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    (shape, b[10 + hlen..].to_vec(), descr)
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

#[derive(Clone, Copy, PartialEq)]
struct C(f32, u32);
impl Eq for C {}
impl PartialOrd for C {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for C {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
    }
}

/// A cache line, so that records start 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// One record per node (`stride` bytes: links, factors, codes, the node's
/// rotated vector) and what the walk needs beside them.
struct Qg {
    dims: usize,
    stride: usize,
    lines: Vec<Line>,
    keys: Vec<u64>,
    top: (u32, usize),
    upper: Vec<Upper>,
    rot: Rotation,
    /// Whether records hold the node's vector as sq8 codes (then `full`
    /// holds the rotated f32 rows, read to re-score the best results).
    sq8: bool,
    full: Vec<f32>,
}

const LINKS: usize = 0;
const FACT: usize = SLOTS * 4;
const CODES: usize = FACT + SLOTS * 12;

impl Qg {
    fn codes_bytes(dims: usize) -> usize {
        dims / 4 * 16
    }
    fn vec_off(&self) -> usize {
        CODES + Self::codes_bytes(self.dims)
    }
    fn data(&self) -> &[u8] {
        // SAFETY: a Vec<Line> is len * 64 initialised bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.lines.len() * 64) }
    }
    fn rec(&self, u: u32) -> &[u8] {
        &self.data()[u as usize * self.stride..(u as usize + 1) * self.stride]
    }
    /// The node's sq8 codes and scale (sq8 records).
    fn codes(&self, u: u32) -> (&[i8], f32) {
        let o = self.vec_off();
        let r = &self.rec(u)[o..o + 4 + self.dims];
        let scale = f32::from_le_bytes(r[..4].try_into().unwrap());
        // SAFETY: i8 and u8 have the same layout.
        let c = unsafe { std::slice::from_raw_parts(r[4..].as_ptr().cast(), self.dims) };
        (c, scale)
    }
    fn full(&self, u: u32) -> &[f32] {
        &self.full[u as usize * self.dims..(u as usize + 1) * self.dims]
    }
    fn vector(&self, u: u32) -> &[f32] {
        if self.sq8 {
            return self.full(u);
        }
        let o = self.vec_off();
        let r = &self.rec(u)[o..o + self.dims * 4];
        // SAFETY: records start 64-byte aligned and the vector's offset is
        // a multiple of 64, so the f32 read is aligned and in bounds.
        unsafe { std::slice::from_raw_parts(r.as_ptr().cast(), self.dims) }
    }

    fn build<G: GraphView>(g: &G, base: &[f32], dims: usize, sq8: bool) -> Qg {
        let n = g.slots();
        let rot = Rotation::new(dims, 0x5147);
        let pd = rot.padded();
        assert_eq!(pd, dims, "probe assumes dims a multiple of 64");
        let node = if sq8 { 4 + dims } else { dims * 4 };
        let stride = (CODES + Self::codes_bytes(dims) + node).next_multiple_of(64);
        let mut rv = vec![0f32; n * dims];
        let mut keys = vec![0u64; n];
        for s in 0..n {
            let k = g.key(s as u32);
            keys[s] = k;
            let mut v = base[k as usize * dims..(k as usize + 1) * dims].to_vec();
            normalize(&mut v);
            rot.apply(&v, &mut rv[s * dims..(s + 1) * dims]);
        }
        // 64-byte aligned backing store.
        let words = (n * stride).div_ceil(64);
        let mut lines: Vec<Line> = Vec::with_capacity(words);
        if std::env::var("QG_HUGE").is_ok_and(|v| v == "1") {
            let p = lines.as_ptr() as usize;
            let from = p.next_multiple_of(1 << 21);
            let to = (p + words * 64) & !((1 << 21) - 1);
            if to > from {
                // SAFETY: advice on memory this Vec owns; it changes no data.
                unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE) };
            }
        }
        lines.resize(words, Line([0u8; 64]));
        // SAFETY: a Vec<Line> is len * 64 initialised bytes.
        let data: &mut [u8] =
            unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast(), words * 64) };
        let sq = (dims as f32).sqrt();
        let mut nb = Vec::new();
        let mut links = 0usize;
        for u in 0..n {
            let rec = &mut data[u * stride..(u + 1) * stride];
            g.neighbors(0, u as u32, &mut nb);
            links += nb.len().min(SLOTS);
            let uv = &rv[u * dims..(u + 1) * dims];
            for j in 0..SLOTS {
                let id = nb.get(j).copied().unwrap_or(u32::MAX);
                rec[LINKS + j * 4..LINKS + j * 4 + 4].copy_from_slice(&id.to_le_bytes());
                if id == u32::MAX {
                    continue;
                }
                let vv = &rv[id as usize * dims..(id as usize + 1) * dims];
                let r: Vec<f32> = vv.iter().zip(uv).map(|(a, b)| a - b).collect();
                let nr = r.iter().map(|x| x * x).sum::<f32>().sqrt();
                let abs: f32 = r.iter().map(|x| x.abs()).sum();
                let xr = if nr > 0.0 { abs / (sq * nr) } else { 1.0 };
                let c: f32 = r
                    .iter()
                    .zip(uv)
                    .map(|(ri, ui)| if *ri > 0.0 { *ui } else { -*ui })
                    .sum::<f32>()
                    / sq;
                let f = [nr * nr, -2.0 * nr / xr, c];
                for (i, x) in f.iter().enumerate() {
                    let o = FACT + (j * 3 + i) * 4;
                    rec[o..o + 4].copy_from_slice(&x.to_le_bytes());
                }
                let block = &mut rec[CODES..CODES + Self::codes_bytes(dims)];
                for gi in 0..dims / 4 {
                    let mut nib = 0u8;
                    for b in 0..4 {
                        if r[gi * 4 + b] > 0.0 {
                            nib |= 1 << b;
                        }
                    }
                    set_block_nibble(block, gi, j, nib);
                }
            }
            let o = CODES + Self::codes_bytes(dims);
            if sq8 {
                let m = uv.iter().fold(0f32, |a, x| a.max(x.abs()));
                let scale = if m > 0.0 { m / 127.0 } else { 1.0 };
                rec[o..o + 4].copy_from_slice(&scale.to_le_bytes());
                for (i, x) in uv.iter().enumerate() {
                    rec[o + 4 + i] = ((x / scale).round() as i8) as u8;
                }
            } else {
                for (i, x) in uv.iter().enumerate() {
                    rec[o + i * 4..o + i * 4 + 4].copy_from_slice(&x.to_le_bytes());
                }
            }
        }
        println!("level-0 links per node: {:.1}", links as f64 / n as f64);
        let top = g.entry_point().expect("graph");
        let mut upper: Vec<Upper> = (0..top.1)
            .map(|_| Upper(std::collections::HashMap::new()))
            .collect();
        for u in 0..n as u32 {
            for level in 1..=g.level(u).min(top.1) {
                g.neighbors(level, u, &mut nb);
                upper[level - 1].0.insert(u, nb.clone());
            }
        }
        Qg {
            dims,
            stride,
            lines,
            keys,
            top,
            upper,
            rot,
            sq8,
            full: rv,
        }
    }

    fn f(rec: &[u8], j: usize, i: usize) -> f32 {
        let o = FACT + (j * 3 + i) * 4;
        f32::from_le_bytes(rec[o..o + 4].try_into().unwrap())
    }

    fn search(&self, q: &[f32], k: usize, ef: usize, st: &mut State) -> Vec<u64> {
        let d = self.dims;
        let kern = kernels();
        let mut qn = q.to_vec();
        normalize(&mut qn);
        let qr = &mut st.qr;
        qr.resize(d, 0.0);
        self.rot.apply(&qn, qr);
        // Lookup table: 16 sums per group of 4 coordinates, quantized.
        let groups = d / 4;
        let mut lo_sum = 0f32;
        let mut width = 0f32;
        let lut_f = &mut st.lut_f;
        lut_f.clear();
        for gi in 0..groups {
            let x = &qr[gi * 4..gi * 4 + 4];
            let mut t = [0f32; 16];
            for b in 0..4 {
                for e in 0..1 << b {
                    t[(1 << b) + e] = t[e] + x[b];
                }
            }
            lut_f.extend_from_slice(&t);
            // The smallest and largest subset sums: the negative and the
            // positive coordinates.
            let lo: f32 = x.iter().map(|v| v.min(0.0)).sum();
            let hi: f32 = x.iter().map(|v| v.max(0.0)).sum();
            width = width.max(hi - lo);
            lo_sum += lo;
            st.los.push(lo);
        }
        let delta = width / 255.0;
        st.lut.clear();
        for gi in 0..groups {
            let lo = st.los[gi];
            for e in 0..16 {
                st.lut
                    .push(((lut_f[gi * 16 + e] - lo) / delta).round() as u8);
            }
        }
        st.los.clear();
        let sum_q: f32 = qr.iter().sum();
        let qm = qr.iter().fold(0f32, |a, x| a.max(x.abs()));
        let qscale = if qm > 0.0 { qm / 127.0 } else { 1.0 };
        st.qc.clear();
        st.qc.extend(qr.iter().map(|x| (x / qscale).round() as i8));
        let sq = (d as f32).sqrt();
        let table = Table {
            delta,
            lo_sum,
            sum_q,
            sq,
        };
        // Stamp-based visited set.
        st.stamp = st.stamp.wrapping_add(1);
        if st.stamp == 0 {
            st.seen.fill(0);
            st.stamp = 1;
        }
        st.seen.resize(self.keys.len(), 0);
        let stamp = st.stamp;
        let mut cand: BinaryHeap<Reverse<C>> = BinaryHeap::new();
        let mut res: BinaryHeap<C> = BinaryHeap::new();
        let (mut e, top) = self.top;
        let mut de = (kern.l2sq_f32)(qr, self.vector(e));
        for level in (1..=top).rev() {
            loop {
                let mut moved = false;
                self.upper[level - 1].neighbors(e, &mut st.nb);
                for &n in &st.nb {
                    let dn = (kern.l2sq_f32)(qr, self.vector(n));
                    if dn < de {
                        (e, de, moved) = (n, dn, true);
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        st.seen[e as usize] = stamp;
        let mut sums = [0u16; 32];
        let vo = self.vec_off();
        if st.use_pool {
            // NSG-style: one pool of the ef best (estimate, or distance once
            // expanded), sorted; expand the first unexpanded entry.
            let mut pool = std::mem::take(&mut st.pool);
            pool.clear();
            pool.push((de, e, false));
            let mut cur = 0;
            while cur < pool.len() {
                let u = pool[cur].1;
                pool[cur].2 = true;
                if let Some(&(_, nx, _)) = pool[cur + 1..].iter().find(|p| !p.2) {
                    let r = self.rec(nx);
                    for l in (0..self.stride).step_by(64).take(st.pf_lines) {
                        prefetch(r[l..].as_ptr());
                    }
                    for l in (vo..self.stride).step_by(64) {
                        prefetch(r[l..].as_ptr());
                    }
                }
                st.expanded += 1;
                let rec = self.rec(u);
                let (c, xs) = self.codes(u);
                let du = 2.0 - 2.0 * qscale * xs * (kern.dot_i8)(&st.qc, c);
                pool.remove(cur);
                let at = pool.partition_point(|p| p.0 < du);
                pool.insert(at, (du, u, true));
                (kern.fastscan)(&rec[CODES..vo], &st.lut, &mut sums);
                let mut low = cur;
                fresh(rec, &sums, du, &table, (&mut st.seen, stamp), &mut st.fresh);
                for &(id, est) in &st.fresh {
                    if pool.len() >= ef && est >= pool[ef - 1].0 {
                        continue;
                    }
                    let at = pool.partition_point(|p| p.0 < est);
                    pool.insert(at, (est, id, false));
                    pool.truncate(ef);
                    low = low.min(at);
                }
                cur = pool[low.min(pool.len())..]
                    .iter()
                    .position(|p| !p.2)
                    .map_or(pool.len(), |i| i + low);
            }
            let mut v: Vec<C> = pool.iter().filter(|p| p.2).map(|p| C(p.0, p.1)).collect();
            st.pool = pool;
            v.truncate((2 * k).max(16));
            for c in v.iter_mut() {
                c.0 = (kern.l2sq_f32)(&st.qr, self.full(c.1));
            }
            v.sort_unstable();
            v.truncate(k);
            return v.iter().map(|c| self.keys[c.1 as usize]).collect();
        }
        cand.push(Reverse(C(de, e)));
        while let Some(Reverse(C(est, u))) = cand.pop() {
            if res.len() >= ef && res.peek().is_some_and(|w| est > w.0) {
                break;
            }
            // The next pop is the heap's root or one of its children once
            // this node's neighbours are in: their records start coming in.
            let ahead = st.ahead;
            for Reverse(C(_, nx)) in cand.as_slice().iter().take(ahead) {
                let r = self.rec(*nx);
                for l in (0..self.stride).step_by(64).take(st.pf_lines) {
                    prefetch(r[l..].as_ptr());
                }
                // The node's own vector is read first.
                let vo = self.vec_off();
                for l in (vo..self.stride).step_by(64) {
                    prefetch(r[l..].as_ptr());
                }
            }
            st.expanded += 1;
            let rec = self.rec(u);
            let du = if self.sq8 {
                let (c, xs) = self.codes(u);
                2.0 - 2.0 * qscale * xs * (kern.dot_i8)(&st.qc, c)
            } else {
                (kern.l2sq_f32)(qr, self.vector(u))
            };
            if res.len() < ef {
                res.push(C(du, u));
            } else if res.peek().is_some_and(|w| du < w.0) {
                *res.peek_mut().unwrap() = C(du, u);
            }
            (kern.fastscan)(&rec[CODES..vo], &st.lut, &mut sums);
            let bound = if res.len() >= ef {
                res.peek().unwrap().0
            } else {
                f32::MAX
            };
            fresh(rec, &sums, du, &table, (&mut st.seen, stamp), &mut st.fresh);
            for &(id, est) in &st.fresh {
                if est < bound {
                    cand.push(Reverse(C(est, id)));
                }
            }
        }
        let mut v = res.into_sorted_vec();
        if self.sq8 {
            v.truncate((2 * k).max(16));
            for c in v.iter_mut() {
                c.0 = (kern.l2sq_f32)(&st.qr, self.full(c.1));
            }
            v.sort_unstable();
        }
        v.truncate(k);
        v.iter().map(|c| self.keys[c.1 as usize]).collect()
    }
}

/// The query's quantized lookup table: `Σ over set bits of q ≈ delta ×
/// sum + lo_sum`.
struct Table {
    delta: f32,
    lo_sum: f32,
    sum_q: f32,
    sq: f32,
}

/// The not yet visited neighbours of a record (now marked visited) and
/// their estimated distances, from the fast-scan `sums` and the node's
/// distance `du`.
fn fresh(
    rec: &[u8],
    sums: &[u16; 32],
    du: f32,
    t: &Table,
    (seen, stamp): (&mut [u32], u32),
    out: &mut Vec<(u32, f32)>,
) {
    out.clear();
    for (j, s) in sums.iter().enumerate() {
        let id = u32::from_le_bytes(rec[LINKS + j * 4..LINKS + j * 4 + 4].try_into().unwrap());
        if id == u32::MAX {
            break;
        }
        if seen[id as usize] == stamp {
            continue;
        }
        seen[id as usize] = stamp;
        let ipq = (2.0 * (t.delta * f32::from(*s) + t.lo_sum) - t.sum_q) / t.sq;
        out.push((
            id,
            du + Qg::f(rec, j, 0) + Qg::f(rec, j, 1) * (ipq - Qg::f(rec, j, 2)),
        ));
    }
}

#[derive(Default)]
struct State {
    qr: Vec<f32>,
    lut_f: Vec<f32>,
    lut: Vec<u8>,
    los: Vec<f32>,
    seen: Vec<u32>,
    stamp: u32,
    nb: Vec<u32>,
    qc: Vec<i8>,
    ahead: usize,
    pf_lines: usize,
    use_pool: bool,
    pool: Vec<(f32, u32, bool)>,
    fresh: Vec<(u32, f32)>,
    expanded: u64,
}

/// The upper levels' links, copied from the graph: slot -> list.
struct Upper(std::collections::HashMap<u32, Vec<u32>>);

impl Upper {
    fn neighbors(&self, u: u32, out: &mut Vec<u32>) {
        out.clear();
        if let Some(l) = self.0.get(&u) {
            out.extend_from_slice(l);
        }
    }
}

fn recall(got: &[Vec<u64>], gt: &[Vec<u64>], k: usize) -> f64 {
    let mut hit = 0;
    for (g, t) in got.iter().zip(gt) {
        hit += g.iter().take(k).filter(|x| t[..k].contains(x)).count();
    }
    hit as f64 / (got.len() * k) as f64
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (bs, bb, _) = npy(&a[1]);
    let (qs, qb, _) = npy(&a[2]);
    let (gs, gb, gd) = npy(&a[3]);
    let passes: usize = a.get(4).and_then(|p| p.parse().ok()).unwrap_or(3);
    let (n, d) = (bs[0], bs[1]);
    let base = f32s(&bb);
    let queries = f32s(&qb);
    let nq = qs[0];
    let gt: Vec<Vec<u64>> = (0..gs[0])
        .map(|i| {
            (0..gs[1])
                .map(|j| {
                    let o = i * gs[1] + j;
                    if gd == "<i8" {
                        u64::from_le_bytes(gb[o * 8..o * 8 + 8].try_into().unwrap())
                    } else {
                        u32::from_le_bytes(gb[o * 4..o * 4 + 4].try_into().unwrap()) as u64
                    }
                })
                .collect()
        })
        .collect();
    let space = Space::new(d, Metric::Cos, DType::Sq8).unwrap();
    let params = HnswParams {
        m: 16,
        ef_construction: 128,
        ef_search: 64,
        seed: 42,
    };
    let idx = Index::hnsw(space, params)
        .unwrap()
        .keep_full_precision()
        .unwrap();
    let keys: Vec<u64> = (0..n as u64).collect();
    let vr: Vec<VectorRef<'_>> = base.chunks_exact(d).map(VectorRef::F32).collect();
    let t = Instant::now();
    idx.add_batch(&keys, &vr, 0).unwrap();
    println!("default build: {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let sq8 = std::env::var("QG_NODE").map_or(true, |v| v != "f32");
    let qg = Qg::build(&idx.view(), &base, d, sq8);
    println!(
        "qg build from the graph: {:.1} s, record {} B/node, node vector {}",
        t.elapsed().as_secs_f64(),
        qg.stride,
        if sq8 { "sq8" } else { "f32" }
    );
    if let Ok(r) = std::fs::read_to_string("/proc/self/smaps_rollup") {
        for l in r
            .lines()
            .filter(|l| l.starts_with("AnonHugePages") || l.starts_with("Rss"))
        {
            println!("{l}");
        }
    }
    let k = 10;
    let efs = [16usize, 24, 32, 48, 64, 96, 128, 192];
    let qv: Vec<&[f32]> = queries.chunks_exact(d).take(nq).collect();
    let mut st = State {
        ahead: std::env::var("QG_AHEAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1),
        pf_lines: std::env::var("QG_PF")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(8),
        ..Default::default()
    };
    if let Some(ef) = std::env::var("QG_ONLY").ok().and_then(|v| v.parse().ok()) {
        // Profiling: the probe's walk alone, many passes.
        let t = Instant::now();
        let mut got = Vec::new();
        for _ in 0..passes {
            got = qv.iter().map(|q| qg.search(q, k, ef, &mut st)).collect();
        }
        let qps = (nq * passes) as f64 / t.elapsed().as_secs_f64();
        println!("qg {ef} {:.4} {qps:.0}", recall(&got, &gt, k));
        return;
    }
    println!("engine ef recall qps(best of {passes})");
    for &ef in &efs {
        let mut best = [0f64; 2];
        let mut rec = [0f64; 2];
        for _ in 0..passes {
            for (e, b) in best.iter_mut().enumerate() {
                let t = Instant::now();
                let got: Vec<Vec<u64>> = if e == 0 {
                    let o = SearchOptions {
                        ef: Some(ef),
                        ..Default::default()
                    };
                    qv.iter()
                        .map(|q| {
                            idx.search(VectorRef::F32(q), k, &o)
                                .unwrap()
                                .iter()
                                .map(|x| x.key)
                                .collect()
                        })
                        .collect()
                } else {
                    qv.iter().map(|q| qg.search(q, k, ef, &mut st)).collect()
                };
                let s = t.elapsed().as_secs_f64();
                *b = b.max(nq as f64 / s);
                rec[e] = recall(&got, &gt, k);
            }
        }
        println!("default {ef} {:.4} {:.0}", rec[0], best[0]);
        println!(
            "qg      {ef} {:.4} {:.0}  expanded/query {:.0}",
            rec[1],
            best[1],
            st.expanded as f64 / (nq * passes) as f64
        );
        st.expanded = 0;
    }
}
