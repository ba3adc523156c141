//! The thread that opens and creates the server's collections.
//!
//! A collection's optimizer runs work a caller waits for, and builds once
//! writes pause, at the priority of the thread that opened the collection
//! (`sagitta_store`'s optimizer; a thread cannot take back a priority it
//! gave up). Requests arrive on I/O threads (the scheduler's shortest
//! slice) and ingest lanes (nice +10): a collection created by a Flight
//! upload on an ingest lane built its graph at nice +10, a tenth of a
//! core beside each busy process. So every collection is opened here: a
//! thread started with the registry, at the server's own nice value and
//! the scheduler's default slice.

use parking_lot::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// The opener thread; joined when dropped.
#[derive(Debug)]
pub struct Opener {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Opener {
    /// Starts the thread. If it cannot be started, jobs run on the
    /// caller's thread.
    pub fn start() -> Opener {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("sagitta-opener".into())
            .spawn(move || {
                sagitta_index::sched::priority::default_slice();
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok();
        Opener {
            jobs: Mutex::new(thread.as_ref().map(|_| tx)),
            thread: Mutex::new(thread),
        }
    }

    /// Runs `f` on the opener thread and returns its result (on the
    /// caller's thread if the opener is gone). A panic in `f` goes on in
    /// the caller, as if `f` had run there; the opener thread lives on.
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        });
        let unsent = match self.jobs.lock().as_ref() {
            Some(jobs) => jobs.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        if let Some(job) = unsent {
            job();
        }
        match rx.recv() {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            // A job is dropped unrun only when the thread ends, which
            // `drop` does with no `run` in progress (it takes `&mut`).
            Err(_) => panic!("the opener thread dropped a job"),
        }
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        self.jobs.lock().take();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn jobs_run_on_the_opener_thread_and_return_their_result() {
        let o = Opener::start();
        let name = o.run(|| std::thread::current().name().map(str::to_string));
        assert_eq!(name.as_deref(), Some("sagitta-opener"));
        assert_eq!(o.run(|| 6 * 7), 42);
        // A panic goes on in the caller; the thread serves the next job.
        let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            o.run(|| -> u8 { panic!("in a job") })
        }));
        assert!(p.is_err());
        assert_eq!(o.run(|| 1 + 1), 2);
        drop(o);
    }
}
