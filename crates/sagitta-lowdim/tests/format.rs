//! The low-dimensional index's checked format: the documented header and
//! a round trip, alignment, random and crafted corruption (typed errors
//! naming the offset, never a panic), and the frozen version-1 and -2
//! files read back.

#![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors

mod common;

use common::*;
use proptest::prelude::*;
use sagitta_lowdim::LowDimError;
use sagitta_lowdim::{LowDimIndex, LowDimScratch, LowDimView, LEAF, MAGIC};
use std::sync::Arc;

// ---------------------------------------------------------------------
// The format
// ---------------------------------------------------------------------

/// A copy of `bytes` starting `shift` bytes past an 8-byte boundary.
#[derive(Debug)]
struct Shifted {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl Shifted {
    fn new(bytes: &[u8], shift: usize) -> Shifted {
        let mut buf = vec![0u8; bytes.len() + 16];
        let at = buf.as_ptr().align_offset(8) + shift;
        assert!(at < 16);
        buf[at..at + bytes.len()].copy_from_slice(bytes);
        Shifted {
            buf,
            at,
            len: bytes.len(),
        }
    }
}

impl AsRef<[u8]> for Shifted {
    fn as_ref(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }
}

/// Answers to a fixed set of queries, to compare two views.
fn answers(view: &LowDimView<'_>) -> Vec<(u32, u64, u16)> {
    let mut s = LowDimScratch::default();
    let mut out = Vec::new();
    for q in [0.0f32, 0.3, 0.5, 1.0, 0.12345, 1e4] {
        let q = vec![q; view.dim()];
        for k in [1, view.len()] {
            for h in view.search(&q, k, &mut s).unwrap() {
                out.push((h.id, h.dist.to_bits(), h.label));
            }
        }
    }
    out
}

#[test]
fn bytes_follow_the_documented_header_and_round_trip() {
    for (idx, kind, labels) in [
        (grid_index(300, 5, 21, true), 1u32, true),
        (grid_index(300, 17, 22, false), 1, false),
        (f32_index(300, 3, 23), 2, false),
    ] {
        let b = idx.as_bytes();
        let l = layout(b);
        assert_eq!(&b[..8], MAGIC);
        assert_eq!(rd32(b, 8), 2, "version");
        assert_eq!(rd32(b, 12), kind | u32::from(labels) << 16);
        assert_eq!(rd32(b, 20), LEAF as u32);
        assert_eq!(l.rows, 300);
        assert_eq!(l.nodes, 2 * l.blocks - 1);
        assert!(l.blocks >= 300usize.div_ceil(LEAF));
        assert_eq!(l.end, b.len(), "arrays laid out as documented");
        assert_eq!(rd64(b, 48), (b.len() - 64) as u64);
        assert_eq!(rd32(b, 56), crc32c::crc32c(&b[64..]));
        assert_eq!(rd32(b, 60), crc32c::crc32c(&b[..60]));

        let back = LowDimIndex::from_bytes(b).unwrap();
        assert_eq!(back.as_bytes(), b);
        assert_eq!(answers(&back.view()), answers(&idx.view()));
        let copy = Shifted::new(b, 0);
        let view = LowDimView::parse(copy.as_ref()).unwrap();
        assert_eq!(answers(&view), answers(&idx.view()));
        let shared = LowDimIndex::from_shared(Arc::new(Shifted::new(b, 0))).unwrap();
        assert_eq!(answers(&shared.view()), answers(&idx.view()));
    }
}

#[test]
fn unaligned_buffers_are_refused() {
    for idx in [grid_index(100, 3, 31, true), f32_index(100, 3, 32)] {
        let want = answers(&idx.view());
        for shift in 0..8 {
            let buf = Shifted::new(idx.as_bytes(), shift);
            match LowDimView::parse(buf.as_ref()) {
                // Aligned for every array type (the widest is 4 bytes).
                Ok(view) => {
                    assert_eq!(shift % 4, 0, "shift {shift} parsed");
                    assert_eq!(answers(&view), want);
                }
                Err(LowDimError::Corrupt { .. }) => assert_ne!(shift, 0),
                Err(e) => panic!("shift {shift}: {e:?}"),
            }
            let shared = LowDimIndex::from_shared(Arc::new(Shifted::new(idx.as_bytes(), shift)));
            match shared {
                Ok(i) => {
                    assert_eq!(shift % 4, 0);
                    assert_eq!(answers(&i.view()), want);
                }
                Err(LowDimError::Corrupt { .. }) => assert_ne!(shift, 0),
                Err(e) => panic!("shift {shift}: {e:?}"),
            }
            // from_bytes copies into an aligned buffer: any shift reads.
            let copied = LowDimIndex::from_bytes(buf.as_ref()).unwrap();
            assert_eq!(answers(&copied.view()), want);
        }
    }
}

/// A parsed (possibly damaged) index: searching and voting must not panic.
fn exercise(view: &LowDimView<'_>) {
    let mut s = LowDimScratch::default();
    let len = view.len();
    for q in [0.0f32, 0.5, 1.0, -3.0, 0.12345, 1e4] {
        let q = vec![q; view.dim()];
        for k in [1, len.min(3), len] {
            let hits = view.search(&q, k, &mut s).unwrap();
            // Damaged boxes (a NaN bound) may drop subtrees: at most k.
            assert!(hits.len() <= k);
            assert!(hits.iter().all(|h| (h.id as usize) < len));
            if view.has_labels() {
                view.classify(&q, k, &mut s).unwrap();
            }
        }
    }
}

/// Parses damaged bytes both ways: `Err(Corrupt)` or a working index,
/// the same either way. Returns whether they parsed.
fn parse_damaged(bytes: &[u8]) -> bool {
    let copy = Shifted::new(bytes, 0);
    let view = LowDimView::parse(copy.as_ref());
    let owned = LowDimIndex::from_bytes(bytes);
    match (view, owned) {
        (Ok(view), Ok(owned)) => {
            exercise(&view);
            exercise(&owned.view());
            true
        }
        (Err(LowDimError::Corrupt { .. }), Err(LowDimError::Corrupt { .. })) => false,
        (a, b) => panic!("parse gave {a:?}, from_bytes gave {b:?}"),
    }
}

fn bases() -> &'static [Vec<u8>] {
    static BASES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    BASES.get_or_init(|| {
        vec![
            grid_index(300, 5, 41, true).as_bytes().to_vec(),
            f32_index(150, 3, 42).as_bytes().to_vec(),
            grid_index(10, 2, 43, false).as_bytes().to_vec(),
            grid_index(200, 20, 44, true).as_bytes().to_vec(),
        ]
    })
}

/// Header fields: (offset, width in bytes).
const FIELDS: [(usize, usize); 11] = [
    (8, 4),
    (12, 2),
    (14, 2),
    (16, 4),
    (20, 4),
    (24, 8),
    (32, 4),
    (36, 4),
    (40, 8),
    (48, 8),
    (0, 8),
];

#[derive(Debug, Clone)]
enum Mutation {
    /// XOR one byte with a non-zero mask.
    Flip(prop::sample::Index, u8),
    /// Cut the buffer short.
    Truncate(prop::sample::Index),
    /// Set a header field to a random value.
    Set(usize, u64),
    /// Add a small amount to a header field.
    Nudge(usize, i64),
    /// Write a random word anywhere in the body (a 4-byte boundary).
    Word(prop::sample::Index, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, m)| Mutation::Flip(i, m)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        2 => (0..FIELDS.len(), prop_oneof![any::<u64>(), 0u64..80]).prop_map(|(f, v)| Mutation::Set(f, v)),
        2 => (0..FIELDS.len(), -3i64..=3).prop_map(|(f, d)| Mutation::Nudge(f, d)),
        2 => (any::<prop::sample::Index>(), prop_oneof![any::<u32>(), 0u32..400, Just(0x8000_0000u32), 0x8000_0000u32..0x8000_0030]).prop_map(|(i, w)| Mutation::Word(i, w)),
    ]
}

fn apply(b: &mut Vec<u8>, m: &Mutation) {
    match *m {
        Mutation::Flip(ref i, mask) if !b.is_empty() => {
            let at = i.index(b.len());
            b[at] ^= mask;
        }
        Mutation::Truncate(ref i) => {
            let len = i.index(b.len().max(1));
            b.truncate(len);
        }
        Mutation::Set(f, v) if b.len() >= 64 => {
            let (at, w) = FIELDS[f];
            let bytes = v.to_le_bytes();
            b[at..at + w].copy_from_slice(&bytes[..w]);
        }
        Mutation::Nudge(f, d) if b.len() >= 64 => {
            let (at, w) = FIELDS[f];
            let mut cur = [0u8; 8];
            cur[..w].copy_from_slice(&b[at..at + w]);
            let v = u64::from_le_bytes(cur).wrapping_add(d as u64);
            b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
        }
        Mutation::Word(ref i, w) if b.len() >= 68 => {
            let at = 64 + i.index((b.len() - 64) / 4) * 4;
            wr32(b, at, w);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Damaged bytes, with or without the checksums recomputed: never a
    /// panic; a single flipped byte or a cut is always `Corrupt`.
    #[test]
    fn damaged_bytes_are_refused_or_harmless(
        base in 0..4usize,
        muts in prop::collection::vec(mutation(), 1..4),
        resealed in any::<bool>(),
    ) {
        let orig = &bases()[base];
        let mut b = orig.clone();
        for m in &muts {
            apply(&mut b, m);
        }
        if resealed {
            reseal(&mut b);
        }
        let parsed = parse_damaged(&b);
        let strict = match muts.as_slice() {
            [Mutation::Flip(..)] => !resealed,
            [Mutation::Truncate(_)] => true,
            _ => false,
        };
        if strict {
            prop_assert!(!parsed, "{:?} parsed", muts);
        }
        if b == *orig {
            prop_assert!(parsed);
        }
    }
}

/// A corrupt error names the byte it found wrong: the header field, the
/// node or the id; and, once the caller names it, the file.
#[test]
fn corrupt_errors_name_the_offset() {
    let idx = grid_index(400, 3, 54, true);
    let orig = idx.as_bytes().to_vec();
    let offset = |b: &[u8]| match LowDimView::parse(Shifted::new(b, 0).as_ref()) {
        Err(LowDimError::Corrupt { offset, .. }) => offset,
        other => panic!("{other:?}"),
    };
    let damaged = |at: usize, v: u32, sealed: bool| {
        let mut b = orig.clone();
        wr32(&mut b, at, v);
        if sealed {
            reseal(&mut b);
        }
        b
    };
    assert_eq!(offset(&damaged(0, 0, false)), 0, "magic");
    assert_eq!(offset(&damaged(8, 99, false)), 8, "version");
    assert_eq!(offset(&damaged(16, 4, false)), 60, "header checksum");
    assert_eq!(offset(&damaged(16, 0, true)), 16, "dim");
    assert_eq!(offset(&damaged(20, 17, true)), 20, "leaf");
    let l = layout(&orig);
    let body = l.ids_at + 4;
    let mut b = orig.clone();
    b[body] ^= 1;
    assert_eq!(offset(&b), 56, "body checksum");
    assert_eq!(
        offset(&damaged(l.ids_at + 8, l.rows as u32, true)),
        (l.ids_at + 8) as u64,
        "an id past the rows"
    );
    assert_eq!(
        offset(&damaged(64, 0, true)),
        64,
        "the root points to itself"
    );
    assert_eq!(offset(&orig[..40]), 40, "cut in the header");

    let e = LowDimIndex::from_bytes(&damaged(0, 0, false))
        .unwrap_err()
        .in_file(std::path::Path::new("refs/index.sgld"));
    assert!(matches!(
        &e,
        LowDimError::Corrupt { file: Some(f), offset: 0, .. } if f.ends_with("index.sgld")
    ));
    let msg = e.to_string();
    assert!(
        msg.contains("refs/index.sgld") && msg.contains("bad magic"),
        "{msg}"
    );
    // Other errors pass through `in_file` as they are.
    assert_eq!(
        LowDimError::ZeroK(0).in_file(std::path::Path::new("x")),
        LowDimError::ZeroK(0)
    );
}

/// Structural damage with both checksums recomputed: each is `Corrupt`.
#[test]
fn crafted_structural_damage_is_corrupt() {
    for base in [
        grid_index(400, 3, 51, true),
        f32_index(400, 7, 52),
        grid_index(1000, 20, 53, false),
    ] {
        let orig = base.as_bytes().to_vec();
        let l = layout(&orig);
        assert_eq!(l.end, orig.len());
        let n = l.nodes;
        assert!(n >= 7, "need a few levels, got {n} nodes");
        fn node(i: usize, w: usize) -> usize {
            64 + 8 * i + 4 * w
        }
        let word = |i: usize, w: usize| rd32(&orig, node(i, w));
        let is_leaf = |i: usize| word(i, 1) & 0x8000_0000 != 0;
        let internal: Vec<usize> = (0..n).filter(|&i| !is_leaf(i)).collect();
        let leaves: Vec<usize> = (0..n).filter(|&i| is_leaf(i)).collect();
        let count = |i: usize| (word(i, 1) & 0x7fff_ffff) as usize;
        let second = internal[1];
        assert!(second > 0 && !is_leaf(0));
        // A leaf with spare slots, and its neighbour with a row to give.
        let short = *leaves.iter().find(|&&i| count(i) < LEAF).unwrap();
        let other = *leaves
            .iter()
            .find(|&&i| i != short && count(i) > 1)
            .unwrap();
        let (cs, co) = (count(short) as u32, count(other) as u32);
        let (l1, l2) = (leaves[1], leaves[2]);

        // Control: resealing untouched bytes parses.
        let mut same = orig.clone();
        reseal(&mut same);
        assert_eq!(same, orig);

        type Edit = Box<dyn Fn(&mut Vec<u8>)>;
        let set = |at: usize, v: u32| -> Edit { Box::new(move |b: &mut Vec<u8>| wr32(b, at, v)) };
        let root_l = word(0, 0);
        let mut cases: Vec<(&str, Edit)> = vec![
            ("root points to itself", set(node(0, 0), 0)),
            ("root's right child is the root", set(node(0, 1), 0)),
            (
                "a node points to itself",
                set(node(second, 0), second as u32),
            ),
            (
                "a node points backwards",
                set(node(second, 1), second as u32 - 1),
            ),
            ("a child past the nodes", set(node(0, 1), n as u32)),
            (
                "a child far past the nodes",
                set(node(second, 0), 0x7fff_ffff),
            ),
            ("two parents, one child", set(node(0, 1), root_l)),
            ("the root made a leaf", set(node(0, 1), 0x8000_0000 | 32)),
            (
                "the root made a leaf of block 0",
                Box::new(|b: &mut Vec<u8>| {
                    wr32(b, 64, 0);
                    wr32(b, 68, 0x8000_0000 | 5);
                }),
            ),
            ("a leaf with 0 rows", set(node(leaves[0], 1), 0x8000_0000)),
            (
                "a leaf with LEAF + 1 rows",
                set(node(leaves[1], 1), 0x8000_0000 | (LEAF as u32 + 1)),
            ),
            (
                "a leaf with 2^31 - 1 rows",
                set(node(leaves[2], 1), 0xffff_ffff),
            ),
            (
                "a leaf owning the next leaf's block",
                set(node(leaves[0], 0), word(leaves[1], 0)),
            ),
            (
                "a leaf owning a block past the end",
                set(node(*leaves.last().unwrap(), 0), l.blocks as u32),
            ),
            (
                "a leaf owning a huge block",
                set(node(leaves[3], 0), 0x7fff_fff0),
            ),
            (
                "two leaves' blocks swapped",
                Box::new(move |b: &mut Vec<u8>| {
                    let (x, y) = (rd32(b, node(l1, 0)), rd32(b, node(l2, 0)));
                    wr32(b, node(l1, 0), y);
                    wr32(b, node(l2, 0), x);
                }),
            ),
            ("a row id equal to the rows", set(l.ids_at, l.rows as u32)),
            (
                "a row id of u32::MAX in a spare slot",
                set(
                    l.ids_at + 4 * (rd32(&orig, node(short, 0)) as usize * LEAF + LEAF - 1),
                    u32::MAX,
                ),
            ),
            (
                "a row held twice, another missing",
                set(l.ids_at + 4, rd32(&orig, l.ids_at)),
            ),
            (
                "rows moved between leaves (one held twice, one missing)",
                Box::new(move |b: &mut Vec<u8>| {
                    wr32(b, node(short, 1), 0x8000_0000 | (cs + 1));
                    wr32(b, node(other, 1), 0x8000_0000 | (co - 1));
                }),
            ),
            // Header counts.
            (
                "one block too many",
                Box::new(|b: &mut Vec<u8>| {
                    add32(b, 36, 1);
                    add32(b, 32, 2);
                }),
            ),
            (
                "one block too many, body grown to match",
                Box::new(|b: &mut Vec<u8>| {
                    add32(b, 36, 1);
                    add32(b, 32, 2);
                    let want = layout(b).end;
                    b.resize(want, 0);
                    wr64(b, 48, (want - 64) as u64);
                }),
            ),
            (
                "one block too few",
                Box::new(|b: &mut Vec<u8>| {
                    add32(b, 36, -1);
                    add32(b, 32, -2);
                }),
            ),
            (
                "nodes not 2 blocks - 1",
                Box::new(|b: &mut Vec<u8>| add32(b, 32, 1)),
            ),
            (
                "one row fewer",
                Box::new(|b: &mut Vec<u8>| add64(b, 24, -1)),
            ),
            ("one row more", Box::new(|b: &mut Vec<u8>| add64(b, 24, 1))),
            ("no rows", Box::new(|b: &mut Vec<u8>| wr64(b, 24, 0))),
            (
                "2^32 rows",
                Box::new(|b: &mut Vec<u8>| wr64(b, 24, 1 << 32)),
            ),
            (
                "blocks 0",
                Box::new(|b: &mut Vec<u8>| {
                    wr32(b, 36, 0);
                    wr32(b, 32, u32::MAX);
                }),
            ),
            (
                "body length off",
                Box::new(|b: &mut Vec<u8>| add64(b, 48, 64)),
            ),
            ("dim 0", Box::new(|b: &mut Vec<u8>| wr32(b, 16, 0))),
            ("dim 33", Box::new(|b: &mut Vec<u8>| wr32(b, 16, 33))),
            ("two more dims", Box::new(|b: &mut Vec<u8>| add32(b, 16, 2))),
            ("leaf 16", Box::new(|b: &mut Vec<u8>| wr32(b, 20, 16))),
            ("kind 0", Box::new(|b: &mut Vec<u8>| b[12] = 0)),
            ("kind 3", Box::new(|b: &mut Vec<u8>| b[12] = 3)),
            (
                "the other kind",
                Box::new(|b: &mut Vec<u8>| b[12] = 3 - b[12]),
            ),
            ("unknown flag", Box::new(|b: &mut Vec<u8>| b[14] |= 2)),
            (
                "labels flag toggled",
                Box::new(|b: &mut Vec<u8>| b[14] ^= 1),
            ),
            (
                "scale 0",
                Box::new(|b: &mut Vec<u8>| wr64(b, 40, 0f64.to_bits())),
            ),
            (
                "scale -1",
                Box::new(|b: &mut Vec<u8>| wr64(b, 40, (-1f64).to_bits())),
            ),
            (
                "scale NaN",
                Box::new(|b: &mut Vec<u8>| wr64(b, 40, f64::NAN.to_bits())),
            ),
            (
                "scale inf",
                Box::new(|b: &mut Vec<u8>| wr64(b, 40, f64::INFINITY.to_bits())),
            ),
            ("version 0", Box::new(|b: &mut Vec<u8>| wr32(b, 8, 0))),
            ("version 3", Box::new(|b: &mut Vec<u8>| wr32(b, 8, 3))),
            ("bad magic", Box::new(|b: &mut Vec<u8>| b[0] = b'X')),
            (
                "cut in the body",
                Box::new(|b: &mut Vec<u8>| b.truncate(b.len() - 1)),
            ),
            (
                "cut to the header",
                Box::new(|b: &mut Vec<u8>| b.truncate(64)),
            ),
            (
                "cut in the header",
                Box::new(|b: &mut Vec<u8>| b.truncate(40)),
            ),
        ];
        if l.nodes > 2 * LEAF {
            cases.push((
                "a deeper node points backwards",
                set(node(internal[3], 0), internal[2] as u32),
            ));
        }
        for (what, edit) in &cases {
            let mut b = orig.clone();
            edit(&mut b);
            assert_ne!(b, orig, "{what}: no change");
            // Unsealed, the checksums catch it (or the first checks do).
            assert!(!parse_damaged(&b), "{what} (checksums stale) parsed");
            reseal(&mut b);
            let copy = Shifted::new(&b, 0);
            match LowDimView::parse(copy.as_ref()) {
                Err(LowDimError::Corrupt {
                    file,
                    offset,
                    reason,
                }) => {
                    assert!(!reason.is_empty());
                    assert_eq!(file, None);
                    assert!(offset as usize <= b.len(), "{what}: offset {offset}");
                }
                Ok(_) => panic!("{what}: parsed"),
                Err(e) => panic!("{what}: {e:?}"),
            }
            assert!(
                matches!(
                    LowDimIndex::from_bytes(&b),
                    Err(LowDimError::Corrupt { .. })
                ),
                "{what}"
            );
        }
    }
}

/// Damage the structure checks cannot see (a box that does not hold its
/// rows, coordinates moved anywhere, non-finite `f32` coordinates): the
/// answers may be wrong, but searching never panics or reads out of
/// bounds.
#[test]
fn undetectable_damage_is_harmless() {
    for base in [
        grid_index(400, 3, 61, true),
        f32_index(400, 7, 62),
        grid_index(300, 20, 63, true),
    ] {
        let orig = base.as_bytes().to_vec();
        let l = layout(&orig);
        let boxes_at = (64 + l.nodes * 8).div_ceil(64) * 64;
        let f32_kind = orig[12] == 2;
        let mut words: Vec<u32> = vec![0, 0x7fff_7fff, 0x8000_8000, 0x8001_8001, u32::MAX];
        if f32_kind {
            words.extend([f32::NAN, f32::INFINITY, -f32::MAX, f32::MAX].map(f32::to_bits));
        }
        for w in words {
            // Every box corner word, then every coordinate word.
            for region in [boxes_at..boxes_at + 256, boxes_at..l.ids_at] {
                let mut b = orig.clone();
                let all = region.len() <= 256;
                for at in region.step_by(4) {
                    if all || at % 12 == 0 {
                        wr32(&mut b, at, w);
                    }
                }
                reseal(&mut b);
                assert!(parse_damaged(&b), "word {w:#x}: the structure is intact");
            }
        }
    }
}

// ---------------------------------------------------------------------
// Frozen files of every version
// ---------------------------------------------------------------------

/// The data of `tests/data/lowdim-v1-grid.sgld`: 200 rows of dim 5 on the
/// 10^-2 grid in [-1, 1], some rows repeated, labels 0..=3. Do not change.
fn frozen_grid_data() -> (Vec<f32>, Vec<u16>) {
    let (n, dim) = (200, 5);
    let mut r = Rng(0x5EED_0001);
    let mut rows = Vec::with_capacity(n * dim);
    for i in 0..n {
        if i % 17 == 16 {
            let j = r.below(i as u64) as usize;
            rows.extend_from_within(j * dim..(j + 1) * dim);
        } else {
            rows.extend((0..dim).map(|_| dec(r.below(201) as i64 - 100, 100.0)));
        }
    }
    let labels = (0..n).map(|_| r.below(4) as u16).collect();
    (rows, labels)
}

/// The data of `tests/data/lowdim-v1-f32.sgld`: 150 rows of dim 3 of
/// plain `f32` in [0, 1), no labels. Do not change.
fn frozen_f32_data() -> Vec<f32> {
    let mut r = Rng(0x5EED_0002);
    (0..150 * 3).map(|_| r.unit()).collect()
}

const FROZEN_GRID: &[u8] = include_bytes!("data/lowdim-v1-grid.sgld");
const FROZEN_F32: &[u8] = include_bytes!("data/lowdim-v1-f32.sgld");
const FROZEN_V2_GRID: &[u8] = include_bytes!("data/lowdim-v2-grid.sgld");
const FROZEN_V2_F32: &[u8] = include_bytes!("data/lowdim-v2-f32.sgld");
const FROZEN_V2_FIXED: &[u8] = include_bytes!("data/lowdim-v2-fixed.sgld");

/// The data of `tests/data/lowdim-v2-fixed.sgld`: 400 rows of
/// [`fixed_dims14`] (leaves that fix dimensions), labels 0 and 1. Do not
/// change.
fn frozen_fixed_data() -> (Vec<f32>, Vec<u16>) {
    let rows = fixed_dims14(400, 0x5EED_0003);
    let mut r = Rng(0x5EED_0004);
    let labels = (0..400).map(|_| r.below(2) as u16).collect();
    (rows, labels)
}

/// Writes the frozen files of the current version. Never overwrites one
/// that has bytes: empty it on purpose to write it again (the files must
/// exist, if empty, for this test file to compile).
#[test]
#[ignore = "writes the frozen files of the current version; run once, commit them"]
fn write_frozen_files() {
    use std::io::Write;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    std::fs::create_dir_all(dir).unwrap();
    let v = sagitta_lowdim::FORMAT_VERSION;
    let (rows, labels) = frozen_grid_data();
    let grid = LowDimIndex::build(&rows, 5, Some(&labels)).unwrap();
    let f32s = LowDimIndex::build(&frozen_f32_data(), 3, None).unwrap();
    let (rows, labels) = frozen_fixed_data();
    let fixed = LowDimIndex::build(&rows, 14, Some(&labels)).unwrap();
    for (name, idx) in [("grid", grid), ("f32", f32s), ("fixed", fixed)] {
        let path = format!("{dir}/lowdim-v{v}-{name}.sgld");
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
            continue;
        }
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(idx.as_bytes()).unwrap();
    }
}

/// Checks a frozen grid file against the oracle over its data.
fn check_frozen_grid(bytes: &[u8], rows: &[f32], labels: &[u16], dim: usize, what: &str) {
    let n = rows.len() / dim;
    let idx = LowDimIndex::from_bytes(bytes).unwrap();
    let view = idx.view();
    assert_eq!((view.dim(), view.len()), (dim, n), "{what}");
    let scale = view.grid_scale().expect("a grid file");
    assert!(view.has_labels());
    let oracle = Oracle::new(rows, dim, Some(scale), Some(labels));
    let mut qs: Vec<Vec<f32>> = rows.chunks(dim).map(<[f32]>::to_vec).collect();
    let span = if scale == 100.0 { 100 } else { 10_000 };
    qs.extend(queries(rows, dim, scale, -span, span, 71));
    let mut s = LowDimScratch::default();
    for (i, q) in qs.iter().enumerate() {
        check_query(
            &view,
            &oracle,
            q,
            &[1, 5, 17, n],
            &mut s,
            &format!("{what}, query {i}"),
        );
        for k in [1, 5, 17] {
            check_vote(&view, &oracle, q, k, &mut s);
        }
    }
    // Memory-mapped style: parsed in place.
    let copy = Shifted::new(bytes, 0);
    assert_eq!(
        answers(&LowDimView::parse(copy.as_ref()).unwrap()),
        answers(&view),
        "{what}"
    );
}

/// Checks a frozen `f32` file against the oracle over its data.
fn check_frozen_f32(bytes: &[u8], what: &str) {
    let rows = frozen_f32_data();
    let idx = LowDimIndex::from_bytes(bytes).unwrap();
    let view = idx.view();
    assert_eq!((view.dim(), view.len()), (3, 150));
    assert_eq!(view.grid_scale(), None);
    assert!(!view.has_labels());
    let oracle = Oracle::new(&rows, 3, None, None);
    let mut qs: Vec<Vec<f32>> = rows.chunks(3).map(<[f32]>::to_vec).collect();
    qs.extend(queries(&rows, 3, 1e4, 0, 10_000, 72));
    let mut s = LowDimScratch::default();
    for (i, q) in qs.iter().enumerate() {
        check_query(
            &view,
            &oracle,
            q,
            &[1, 5, 17, 150],
            &mut s,
            &format!("{what}, query {i}"),
        );
    }
}

#[test]
fn frozen_v1_files_read_back() {
    for bytes in [FROZEN_GRID, FROZEN_F32] {
        assert_eq!(&bytes[..8], b"SGLOWDIM");
        assert_eq!(rd32(bytes, 8), 1, "a version-1 file");
        // Written with 32 rows per leaf, before builds took 64.
        assert_eq!(rd32(bytes, 20), 32, "leaf size");
        let idx = LowDimIndex::from_bytes(bytes).unwrap();
        assert_eq!(idx.view().leaf_size(), 32);
        assert_eq!(idx.view().format_version(), 1);
    }
    let (rows, labels) = frozen_grid_data();
    check_frozen_grid(FROZEN_GRID, &rows, &labels, 5, "frozen v1 grid");
    check_frozen_f32(FROZEN_F32, "frozen v1 f32");
}

/// Version 2: grid leaves store only the dimensions their box does not
/// fix (the `fixed` file has many such leaves); `f32` files are laid out
/// as in version 1.
#[test]
fn frozen_v2_files_read_back() {
    for bytes in [FROZEN_V2_GRID, FROZEN_V2_F32, FROZEN_V2_FIXED] {
        assert_eq!(&bytes[..8], b"SGLOWDIM");
        assert_eq!(rd32(bytes, 8), 2, "a version-2 file");
        assert_eq!(rd32(bytes, 20), 64, "leaf size");
        let idx = LowDimIndex::from_bytes(bytes).unwrap();
        assert_eq!(idx.view().format_version(), 2);
    }
    let (rows, labels) = frozen_grid_data();
    check_frozen_grid(FROZEN_V2_GRID, &rows, &labels, 5, "frozen v2 grid");
    check_frozen_f32(FROZEN_V2_F32, "frozen v2 f32");
    let (rows, labels) = frozen_fixed_data();
    check_frozen_grid(FROZEN_V2_FIXED, &rows, &labels, 14, "frozen v2 fixed");
    // The version-1 file of the same data searches the same.
    let v1 = LowDimIndex::from_bytes(FROZEN_GRID).unwrap();
    let v2 = LowDimIndex::from_bytes(FROZEN_V2_GRID).unwrap();
    assert_eq!(answers(&v1.view()), answers(&v2.view()));
}
