//! [`SlotBuf`]: a fixed-capacity, 64-byte aligned buffer of vectors, one per
//! slot at a fixed stride, that threads write concurrently into distinct
//! slots.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

const BUF_ALIGN: usize = 64;

/// Vectors at `slot * stride`. Writes go through `&self` (each slot is
/// written by exactly one thread, the one that claimed it, before the slot
/// is published); reads of a slot happen only after its publication.
pub(crate) struct SlotBuf {
    /// The allocation (16-byte aligned, `BUF_ALIGN` bytes longer).
    base: NonNull<u8>,
    /// The first slot: `base` rounded up to `BUF_ALIGN`.
    ptr: NonNull<u8>,
    stride: usize,
    capacity: usize,
}

// SAFETY: SlotBuf owns its allocation; concurrent access follows the
// claim-write-publish protocol documented on the type (distinct slots are
// disjoint byte ranges, and a slot is read only after a Release/Acquire
// publication that follows its single write).
unsafe impl Send for SlotBuf {}
// SAFETY: see above.
unsafe impl Sync for SlotBuf {}

impl std::fmt::Debug for SlotBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotBuf")
            .field("stride", &self.stride)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl SlotBuf {
    /// Allocated at the allocator's natural 16-byte alignment and
    /// `BUF_ALIGN` bytes longer, then aligned by offset: a zeroed allocation
    /// at that alignment is `calloc`, whose large blocks are fresh mapped
    /// pages the OS zeroes on first touch, where a 64-byte-aligned one would
    /// be `memset` whole up front (40 ms for a 64 MiB mutable part).
    fn layout(stride: usize, capacity: usize) -> Layout {
        let size = stride * capacity + BUF_ALIGN;
        // Sizes are bounded by the index (u32 slots × 64 KiB-ish strides),
        // far below isize::MAX on 64-bit targets.
        Layout::from_size_align(size, 16)
            .unwrap_or_else(|_| std::alloc::handle_alloc_error(Layout::new::<u8>()))
    }

    pub(crate) fn new(stride: usize, capacity: usize) -> Self {
        let layout = Self::layout(stride, capacity);
        // SAFETY: the layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let base = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        let offset = raw.align_offset(BUF_ALIGN);
        // SAFETY: `offset < BUF_ALIGN`, and the allocation is BUF_ALIGN
        // bytes longer than the slots need, so the slots stay inside it.
        let ptr = unsafe { NonNull::new_unchecked(raw.add(offset)) };
        SlotBuf {
            base,
            ptr,
            stride,
            capacity,
        }
    }

    /// A copy with a larger capacity holding the first `used` slots.
    pub(crate) fn grown(&self, capacity: usize, used: usize) -> Self {
        let new = Self::new(self.stride, capacity);
        let bytes = used.min(self.capacity) * self.stride;
        // SAFETY: both buffers hold at least `bytes` bytes and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), new.ptr.as_ptr(), bytes) };
        new
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The stored bytes of `slot` (panics when out of capacity).
    #[inline]
    pub(crate) fn get(&self, slot: usize) -> &[u8] {
        assert!(slot < self.capacity, "slot {slot} out of capacity");
        // SAFETY: in bounds (checked); the slot has been published before
        // any reader learns of it, so no write to it is in flight.
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr().add(slot * self.stride), self.stride)
        }
    }

    /// Writes `bytes` into `slot`.
    ///
    /// # Safety
    /// The caller must have claimed `slot` exclusively and must not have
    /// published it yet: no other thread may read or write it concurrently.
    pub(crate) unsafe fn write(&self, slot: usize, bytes: &[u8]) {
        assert!(slot < self.capacity && bytes.len() <= self.stride);
        // SAFETY: in bounds; exclusivity is the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(slot * self.stride),
                bytes.len(),
            )
        };
    }
}

impl Drop for SlotBuf {
    fn drop(&mut self) {
        // SAFETY: `base` was allocated in `new` with this exact layout.
        unsafe { dealloc(self.base.as_ptr(), Self::layout(self.stride, self.capacity)) };
    }
}
