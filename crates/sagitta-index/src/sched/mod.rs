//! Scheduling, in one place: which work runs first and on which threads.
//!
//! - [`foreground`]: searches first. A running search counts itself;
//!   threads marked as writers or background work sleep at `step()`s
//!   between small units of work while one runs.
//! - [`priority`]: the CPU priority of a thread: the shortest EEVDF slice
//!   for threads that answer requests, nice values for ingest (+10) and
//!   background builds (+10 to +19).
//! - [`threads`]: thread pools joined before the call that made them
//!   returns (no thread outlives its caller).
//!
//! The store's optimizer and the server's executors take their policies
//! from here; no other module sets a thread's priority. The policy
//! constants (which nice value for which work) stay with the work that
//! chooses them (`sagitta-store`'s optimizer, `sagitta-server`'s
//! executors); the mechanisms are here.

pub mod foreground;
pub mod priority;
pub mod threads;
