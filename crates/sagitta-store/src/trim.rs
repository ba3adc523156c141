//! Giving freed memory back to the operating system after large frees.
//!
//! glibc's malloc keeps memory freed in many small pieces (payload rows,
//! text postings, key maps) in its arenas: after a 100,000-row collection
//! with a BM25 field was built and closed, 123 MiB of the process's
//! resident memory was such free memory, returned only by `malloc_trim`.
//! Other allocators hold on to freed memory too and return it only when
//! asked or on a later allocation (mimalloc, the `sagitta` binary's: it
//! purges freed ranges a second after they were freed, but only when one
//! of its threads next allocates or frees, so a server whose threads go
//! quiet after a build kept the build's memory). A program on such an
//! allocator registers how to ask it with [`set_release_hook`]. An
//! optimizer task's start (what flushes freed, before the task allocates
//! its index) and end, the optimizer falling idle, and a collection's
//! close ask both.

use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Registers `f` as the way to return the global allocator's free memory
/// to the operating system (e.g. `mi_collect(true)` for mimalloc), called
/// where a collection has just freed much memory and is about to go quiet.
/// The first registration holds; returns whether this one did.
pub fn set_release_hook(f: fn()) -> bool {
    HOOK.set(f).is_ok()
}

/// Returns the allocators' free memory to the operating system: glibc's
/// arenas where the C library is glibc (`malloc_trim(0)`: milliseconds on
/// a heap of hundreds of megabytes), then the registered hook's.
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas and advises the
    // kernel that free pages in them are unused; it touches no memory a
    // caller owns.
    unsafe {
        libc::malloc_trim(0);
    }
    if let Some(f) = HOOK.get() {
        f();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        CALLS.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn the_first_hook_registered_is_called_on_release() {
        assert!(set_release_hook(count));
        assert!(!set_release_hook(|| {}), "a second registration is refused");
        let before = CALLS.load(Ordering::SeqCst);
        release_free_memory();
        release_free_memory();
        assert_eq!(CALLS.load(Ordering::SeqCst), before + 2);
    }
}
