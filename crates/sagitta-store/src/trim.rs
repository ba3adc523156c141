//! Giving freed memory back to the operating system after large frees.
//!
//! glibc's malloc keeps memory freed in many small pieces (payload rows,
//! text postings, key maps) in its arenas: after a 100,000-row collection
//! with a BM25 field was built and closed, 123 MiB of the process's
//! resident memory was such free memory, returned only by `malloc_trim`.
//! Where the process allocates with glibc (the Python module, any
//! embedding program on the default allocator), a build task's end and a
//! collection's close trim its arenas; elsewhere (the `sagitta` binary
//! runs on mimalloc, other platforms) this does nothing that matters.

/// Returns the allocator's free memory to the operating system where the
/// C library is glibc (`malloc_trim(0)`: milliseconds on a heap of
/// hundreds of megabytes); a no-op elsewhere.
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas and advises the
    // kernel that free pages in them are unused; it touches no memory a
    // caller owns.
    unsafe {
        libc::malloc_trim(0);
    }
}
