//! Read-ahead on demand for mapped data read at random (a segment's key
//! index, a bloom filter's words). Such data is advised random at open,
//! so that the first lookups after a cold open read a page per probe, not
//! the device's whole read-ahead window per probe (8 MiB on some virtual
//! disks: the first lookup of a 100-segment store took 1.6 s). Once the
//! data is in steady use, though, large reads warm it far sooner than a
//! page at a time: after a few uses the owner gives the range back the
//! normal advice (read-ahead around each miss).

use std::sync::atomic::{AtomicU32, Ordering};

/// Counts uses of one mapped range.
#[derive(Debug)]
pub(crate) struct Warmup {
    uses: AtomicU32,
    after: u32,
}

impl Warmup {
    /// A counter that fires at the `after`-th use.
    pub(crate) const fn new(after: u32) -> Warmup {
        Warmup {
            uses: AtomicU32::new(0),
            after,
        }
    }

    /// Whether the range has been used at all.
    #[inline]
    pub(crate) fn used(&self) -> bool {
        self.uses.load(Ordering::Relaxed) > 0
    }

    /// Counts a use; true exactly once, at the `after`-th. After that, a
    /// relaxed load per use.
    #[inline]
    pub(crate) fn note(&self) -> bool {
        if self.uses.load(Ordering::Relaxed) > self.after {
            return false;
        }
        self.uses.fetch_add(1, Ordering::Relaxed) == self.after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_once_at_the_threshold() {
        let w = Warmup::new(32);
        let fired: Vec<u32> = (0..200).filter(|_| w.note()).collect();
        assert_eq!(fired.len(), 1);
        let w = Warmup::new(32);
        assert_eq!((0..200).position(|_| w.note()), Some(32));
        let w = Warmup::new(0);
        assert!(!w.used());
        assert!(w.note());
        assert!(w.used());
        assert!(!w.note());
    }
}
