//! The IVF-RaBitQ part of a segment: its header fields and sections
//! checked and located at open (O(partitions): the model's rotation is
//! rebuilt from the seed and the centroids copied), and the segment seen
//! as an [`IvfSource`], whose lists point into the map.

use super::format::{corrupt, parse_ivf, IvfInfo, SectionKind, Sections};
use super::{words, Segment};
use crate::error::Result;
use sagitta_index::ivf::{IvfSource, ListRef, FACTORS};
use sagitta_index::{IvfModel, IvfParams, Space};
use std::path::Path;
use std::sync::atomic::AtomicUsize;

/// The IVF part of an open segment: the model (rotation rebuilt from the
/// seed, centroids copied: O(partitions)) and the byte ranges of the lists.
#[derive(Debug)]
pub(super) struct SegIvf {
    pub(super) model: IvfModel,
    pub(super) params: IvfParams,
    pub(super) nprobe: AtomicUsize,
    pub(super) directory: (usize, usize),
    pub(super) slots: (usize, usize),
    pub(super) codes: (usize, usize),
    pub(super) factors: (usize, usize),
    pub(super) extra: (usize, usize),
}

impl SegIvf {
    /// Reads the IVF header fields of `h` and the IVF sections of `map`:
    /// O(partitions).
    pub(super) fn open(
        path: &Path,
        map: &[u8],
        h: &[u8],
        space: Space,
        slots: u64,
        sections: &Sections<'_>,
    ) -> Result<(SegIvf, IvfInfo)> {
        let info = parse_ivf(h);
        let (parts, bits, seed, nprobe, listed) = (
            info.partitions,
            info.bits,
            info.seed,
            info.nprobe,
            info.listed,
        );
        if parts == 0 || parts as usize > sagitta_index::ivf::MAX_PARTITIONS {
            return Err(corrupt(path, 72, format!("{parts} IVF partitions")));
        }
        if !(1..=8).contains(&bits) {
            return Err(corrupt(path, 76, format!("{bits} RaBitQ bits")));
        }
        if listed > slots {
            return Err(corrupt(
                path,
                96,
                format!("{listed} listed vectors but {slots} slots"),
            ));
        }
        let dims = space.dims;
        let p = u64::from(parts);
        let centroids = sections.find(SectionKind::IvfCentroids, Some(p * dims as u64 * 4))?;
        let directory = sections.find(SectionKind::IvfDirectory, Some((p + 1) * 16))?;
        let cbytes = &map[centroids.0..centroids.0 + centroids.1];
        let centroids_f: Vec<f32> = cbytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if centroids_f.iter().any(|x| !x.is_finite()) {
            return Err(corrupt(path, centroids.0 as u64, "non-finite centroid"));
        }
        let model = IvfModel::from_centroids(dims, bits, space.metric, seed, centroids_f);
        // The directory must be two non-decreasing runs ending at the
        // section sizes; checked here so scans can trust list bounds.
        let dir: Vec<u64> = map[directory.0..directory.0 + directory.1]
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect();
        let (lists, blocks) = dir.split_at(parts as usize + 1);
        let monotone = |v: &[u64]| v.windows(2).all(|w| w[0] <= w[1]) && v[0] == 0;
        let block_ok = lists
            .windows(2)
            .zip(blocks.windows(2))
            .all(|(l, b)| b[1].checked_sub(b[0]) == Some((l[1] - l[0].min(l[1])).div_ceil(32)));
        let total_blocks = blocks[parts as usize];
        if !monotone(lists) || !monotone(blocks) || lists[parts as usize] != listed || !block_ok {
            return Err(corrupt(path, directory.0 as u64, "bad IVF directory"));
        }
        let slots_sec = sections.find(SectionKind::IvfSlots, Some(listed * 4))?;
        let codes = sections.find(
            SectionKind::IvfCodes,
            Some(total_blocks * model.block_bytes() as u64),
        )?;
        let factors = sections.find(SectionKind::IvfFactors, Some(listed * FACTORS as u64 * 4))?;
        let extra = sections.find(
            SectionKind::IvfExtra,
            Some(listed * model.ex_bytes() as u64),
        )?;
        let params = IvfParams {
            bits,
            partitions: Some(parts as usize),
            nprobe: nprobe as usize,
            refine: info.refine.map(|r| r as usize),
            seed,
            ..IvfParams::default()
        };
        Ok((
            SegIvf {
                model,
                params,
                nprobe: AtomicUsize::new(nprobe as usize),
                directory,
                slots: slots_sec,
                codes,
                factors,
                extra,
            },
            info,
        ))
    }
}

/// A segment seen as an IVF source.
pub(super) struct SegIvfView<'a> {
    pub(super) seg: &'a Segment,
    pub(super) ivf: &'a SegIvf,
}

impl IvfSource for SegIvfView<'_> {
    fn model(&self) -> &IvfModel {
        &self.ivf.model
    }

    fn with_list(&self, p: usize, f: &mut dyn FnMut(ListRef<'_>)) {
        let parts = self.ivf.model.partitions();
        let dir: &[u64] = words(self.seg.bytes(self.ivf.directory));
        let (Some(&a), Some(&b), Some(&ba), Some(&bb)) = (
            dir.get(p),
            dir.get(p + 1),
            dir.get(parts + 1 + p),
            dir.get(parts + 2 + p),
        ) else {
            return;
        };
        let (a, b, ba, bb) = (a as usize, b as usize, ba as usize, bb as usize);
        let m = &self.ivf.model;
        let slots: &[u32] = words(self.seg.bytes(self.ivf.slots));
        let factors: &[f32] = words(self.seg.bytes(self.ivf.factors));
        let codes = self.seg.bytes(self.ivf.codes);
        let extra = self.seg.bytes(self.ivf.extra);
        let (bbytes, xbytes) = (m.block_bytes(), m.ex_bytes());
        let list = (|| {
            Some(ListRef {
                slots: slots.get(a..b)?,
                codes: codes.get(ba.checked_mul(bbytes)?..bb.checked_mul(bbytes)?)?,
                factors: factors.get(a * FACTORS..b.checked_mul(FACTORS)?)?,
                ex: extra.get(a.checked_mul(xbytes)?..b.checked_mul(xbytes)?)?,
            })
        })();
        // Out-of-range directory entries (a corrupt file) read as an empty
        // list; `ivf::search` also checks the lengths agree.
        if let Some(list) = list {
            f(list);
        }
    }
}
