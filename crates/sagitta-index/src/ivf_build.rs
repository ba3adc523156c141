//! [`IvfBuilder`]: the partitions of an IVF-RaBitQ segment built from rows
//! that arrive a chunk at a time, for a writer that takes the rows
//! themselves from elsewhere (the store's optimizer reads them from the
//! memory-mapped segments it merges). Nothing here holds every row: the
//! model is trained on the sample [`IvfParams::training_sample`] picks
//! (the rows [`IvfModel::train`] would train on, so the model is the one
//! an [`crate::Index`] of kind `IvfRq` trains on all of them), then each
//! row is encoded into its partition, slot after slot. What is held is
//! the sample while training, then the codes (the lists), about
//! `padded / 8 + 20` bytes a row at 1 bit.

use crate::index::{IvfExport, IvfListData};
use crate::ivf::{Encoded, IvfModel, IvfParams, List};
use crate::kmeans::Progress;
use crate::{DType, IndexError, Result, Space, VectorRef};
use rayon::prelude::*;
use std::sync::Arc;

/// Partitions built a chunk of rows at a time; see the module docs.
#[derive(Debug)]
pub struct IvfBuilder {
    space: Space,
    model: Arc<IvfModel>,
    lists: Vec<List>,
    /// Rows pushed so far (the next row's slot).
    next: u32,
}

impl IvfBuilder {
    /// Trains the model of an index of `rows` rows in `space` from
    /// `sample`: the stored rows (as [`Space::encode`] writes them,
    /// `space.stride()` bytes each) at the positions
    /// `params.training_sample(rows)` gives, in that order. Each is seen
    /// as an `IvfRq` index sees a row it trains on (unit length under
    /// cosine).
    ///
    /// Errors: a space that is not f32 / f16 under l2, ip or cos, invalid
    /// `params`, a sample of another length, a row the space refuses.
    pub fn train(
        space: Space,
        params: &IvfParams,
        rows: usize,
        sample: &[u8],
        progress: &mut dyn FnMut(Progress),
    ) -> Result<IvfBuilder> {
        params.validate()?;
        if !matches!(space.dtype, DType::F32 | DType::F16) || space.metric.is_binary() {
            return Err(IndexError::InvalidParameter {
                name: "kind",
                value: "ivf_rq".into(),
                reason: "IVF-RaBitQ needs float vectors (f32 or f16) under l2, ip or cos",
            });
        }
        let stride = space.stride();
        let want = params.training_sample(rows).len();
        if sample.len() != want * stride {
            return Err(IndexError::InvalidParameter {
                name: "sample",
                value: (sample.len() / stride.max(1)).to_string(),
                reason: "must hold the stored rows at the positions of training_sample(rows)",
            });
        }
        // As `Index::train` sees them: the stored row as floats, encoded
        // again as a user vector, and seen as the model sees stored rows.
        let mut buf = vec![0u8; stride];
        let mut data = Vec::with_capacity(want * space.dims);
        for (i, row) in sample.chunks_exact(stride.max(1)).enumerate() {
            let x = space.model_floats(row).unwrap_or_default();
            space
                .encode(VectorRef::F32(&x), &mut buf)
                .map_err(|e| IndexError::at_row(i, e))?;
            data.extend(space.model_floats(&buf).unwrap_or_default());
        }
        let model =
            IvfModel::train_sampled(&data, rows, space.dims, space.metric, params, progress)?;
        Ok(IvfBuilder {
            space,
            lists: vec![List::default(); model.partitions()],
            model: Arc::new(model),
            next: 0,
        })
    }

    /// The trained model.
    pub fn model(&self) -> &Arc<IvfModel> {
        &self.model
    }

    /// Rows pushed so far.
    pub fn len(&self) -> usize {
        self.next as usize
    }

    /// Whether no row was pushed.
    pub fn is_empty(&self) -> bool {
        self.next == 0
    }

    /// Encodes `rows` (stored rows, `space.stride()` bytes each) as the
    /// next slots, in order: encoded in parallel on the current rayon
    /// pool, appended to their partitions in slot order (the lists come
    /// out the same whatever the threads).
    pub fn push_rows(&mut self, rows: &[u8]) -> Result<()> {
        let stride = self.space.stride();
        if stride == 0 || !rows.len().is_multiple_of(stride) {
            return Err(IndexError::InvalidParameter {
                name: "rows",
                value: rows.len().to_string(),
                reason: "must hold whole stride-long rows",
            });
        }
        let n = rows.len() / stride;
        if self.next as usize + n > crate::index::MAX_SLOTS {
            return Err(IndexError::Full(crate::index::MAX_SLOTS));
        }
        let (space, model) = (self.space, &self.model);
        let encoded: Vec<Encoded> = rows
            .par_chunks_exact(stride)
            .map_init(Vec::new, |tmp, row| {
                crate::sched::foreground::step();
                let x = space.model_floats(row).unwrap_or_default();
                let mut e = Encoded::default();
                model.encode(&x, tmp, &mut e);
                e
            })
            .collect();
        for e in &encoded {
            self.lists[e.partition as usize].push(model, self.next, e);
            self.next += 1;
        }
        Ok(())
    }

    /// The model and partitions, as a segment writer takes them.
    pub fn export(self) -> IvfExport {
        IvfExport {
            model: self.model,
            lists: self
                .lists
                .into_iter()
                .map(|l| IvfListData {
                    slots: l.slots,
                    codes: l.codes,
                    factors: l.factors,
                    ex: l.ex,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{GraphView, Index, Metric};

    fn rows(n: usize, dims: usize, seed: u64) -> Vec<f32> {
        let mut st = seed;
        (0..n * dims)
            .map(|_| (crate::rotation::splitmix64(&mut st) % 20_000) as f32 / 10_000.0 - 1.0)
            .collect()
    }

    fn stored(space: Space, x: &[f32]) -> Vec<u8> {
        let stride = space.stride();
        let mut out = vec![0u8; x.len() / space.dims * stride];
        for (v, o) in x.chunks_exact(space.dims).zip(out.chunks_exact_mut(stride)) {
            space.encode(VectorRef::F32(v), o).unwrap();
        }
        out
    }

    /// The sample drawn with a map is the one the dense shuffle drew
    /// (what `IvfModel::train` did before), for sizes around the cap.
    #[test]
    fn the_training_sample_is_the_dense_shuffles() {
        for (n, mpp) in [(10, 4), (300, 4), (5000, 256), (20_000, 16), (20_000, 1)] {
            let params = IvfParams {
                max_points_per_partition: mpp,
                partition_size: 100,
                ..IvfParams::default()
            };
            let parts = params.partitions_for(n);
            let cap = (parts * mpp).max(parts);
            let mut want: Vec<usize> = (0..n).collect();
            if n > cap {
                let mut st = params.seed ^ 0x5EED;
                for i in 0..cap {
                    let j = i + (crate::rotation::splitmix64(&mut st) % (n - i) as u64) as usize;
                    want.swap(i, j);
                }
                want.truncate(cap);
                want.sort_unstable();
            }
            assert_eq!(params.training_sample(n), want, "n {n} mpp {mpp}");
        }
    }

    /// A builder fed the sample, then every row a chunk at a time, gives
    /// the model an `IvfRq` index trains on all rows, every row in the
    /// partition that index puts it in, and the same codes.
    #[test]
    fn a_streamed_build_matches_the_index() {
        for metric in [Metric::L2, Metric::Cos, Metric::Ip] {
            let space = Space::new(24, metric, DType::F32).unwrap();
            let params = IvfParams {
                partition_size: 64,
                max_points_per_partition: 16,
                bits: 3,
                ..IvfParams::default()
            };
            let n = 3000;
            let x = rows(n, 24, 11);
            let st = stored(space, &x);
            let stride = space.stride();
            let pick = params.training_sample(n);
            assert!(pick.len() < n, "the sample is a sample");
            let sample: Vec<u8> = pick
                .iter()
                .flat_map(|&i| st[i * stride..(i + 1) * stride].iter().copied())
                .collect();
            // k-means sums per thread: one thread here, as the index's
            // batch below, so both add in the same order.
            let one = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap();
            let mut b = one
                .install(|| IvfBuilder::train(space, &params, n, &sample, &mut |_| {}))
                .unwrap();
            for chunk in st.chunks(stride * 700) {
                b.push_rows(chunk).unwrap();
            }
            assert_eq!(b.len(), n);

            let index = Index::ivf_rq(space, params).unwrap();
            let keys: Vec<u64> = (0..n as u64).collect();
            index.upsert_encoded_batch(&keys, &st, 1).unwrap();
            assert_eq!(
                *b.model().as_ref(),
                *index.ivf_model().unwrap(),
                "{metric:?}: same model"
            );
            let (ours, theirs) = (b.export(), index.ivf_export().unwrap());
            // The index numbers slots as its threads claim them: compare
            // by key (slot of ours == key).
            for (p, (a, t)) in ours.lists.iter().zip(&theirs.lists).enumerate() {
                let view = index.view();
                let mut want: Vec<u64> = t.slots.iter().map(|&s| view.key(s)).collect();
                drop(view);
                want.sort_unstable();
                let got: Vec<u64> = a.slots.iter().map(|&s| u64::from(s)).collect();
                assert_eq!(got, want, "{metric:?}: partition {p}");
                assert_eq!(a.factors.len(), t.factors.len());
            }
        }
    }

    #[test]
    fn refuses_a_sample_of_another_length_and_non_float_spaces() {
        let space = Space::new(8, Metric::L2, DType::F32).unwrap();
        let params = IvfParams::default();
        let e = IvfBuilder::train(space, &params, 100, &[0u8; 32], &mut |_| {});
        assert!(matches!(e, Err(IndexError::InvalidParameter { .. })));
        let i8s = Space::new(8, Metric::L2, DType::I8).unwrap();
        let e = IvfBuilder::train(i8s, &params, 1, &[0u8; 16], &mut |_| {});
        assert!(matches!(e, Err(IndexError::InvalidParameter { .. })));
    }
}
