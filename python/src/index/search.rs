//! A batch of queries against one index: `k` slots per query, filled in
//! parallel (one query, or `threads=1`, runs on the calling thread).

use super::threads::pool;
use crate::convert::NO_KEY;
use rayon::prelude::*;
use sagitta_index::{IndexError, IndexRead, SearchOptions, VectorRef};

/// Flat result buffers of a batch: keys and distances (`n * k` entries,
/// [`NO_KEY`] and `+inf` past each query's count) and the counts.
pub(super) type Found = (Vec<u64>, Vec<f32>, Vec<i64>);

/// Searches every query of `refs` for its `k` nearest under `opts`,
/// keeping matches within `radius`; `threads` 0 is every core. An error
/// names its row unless the batch is a `single` 1-D query.
pub(super) fn batch(
    r: &dyn IndexRead,
    refs: &[VectorRef<'_>],
    k: usize,
    opts: &SearchOptions<'_>,
    radius: Option<f32>,
    single: bool,
    threads: usize,
) -> Result<Found, IndexError> {
    let n = refs.len();
    let mut keys_out = vec![NO_KEY; n * k];
    let mut dist_out = vec![f32::INFINITY; n * k];
    let mut counts = vec![0i64; n];
    let one = |i: usize, q: VectorRef<'_>, ko: &mut [u64], dout: &mut [f32], c: &mut i64| {
        let found = r.search(q, k, opts).map_err(|e| match e {
            e @ (IndexError::ZeroK(_) | IndexError::Empty) => e,
            e if single => e,
            e => IndexError::at_row(i, e),
        })?;
        let mut m = 0;
        for nb in found {
            if radius.is_some_and(|rad| nb.distance > rad) {
                break;
            }
            ko[m] = nb.key;
            dout[m] = nb.distance;
            m += 1;
        }
        *c = m as i64;
        Ok::<(), IndexError>(())
    };
    let par = |ko: &mut [u64], dout: &mut [f32], cs: &mut [i64]| {
        ko.par_chunks_mut(k)
            .zip(dout.par_chunks_mut(k))
            .zip(cs.par_iter_mut())
            .zip(refs.par_iter())
            .enumerate()
            .try_for_each(|(i, (((ko, dout), c), q))| one(i, *q, ko, dout, c))
    };
    let res = if n <= 1 || threads == 1 {
        keys_out
            .chunks_mut(k)
            .zip(dist_out.chunks_mut(k))
            .zip(counts.iter_mut())
            .zip(refs.iter())
            .enumerate()
            .try_for_each(|(i, (((ko, dout), c), q))| one(i, *q, ko, dout, c))
    } else if threads == 0 {
        par(&mut keys_out, &mut dist_out, &mut counts)
    } else {
        match pool(threads) {
            Ok(p) => p.install(|| par(&mut keys_out, &mut dist_out, &mut counts)),
            Err(_) => par(&mut keys_out, &mut dist_out, &mut counts),
        }
    };
    res.map(|()| (keys_out, dist_out, counts))
}
