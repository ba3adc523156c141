//! Thread pools whose threads are joined before the caller goes on.

use rayon::{ThreadPool, ThreadPoolBuildError, ThreadPoolBuilder};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// Builds the pool `builder` describes, runs `f` on it, then drops the pool
/// and joins every one of its threads (`pthread_join`: the thread has fully
/// exited, thread-locals freed) before returning. A pool dropped the usual
/// way, or rayon's `build_scoped`, lets its threads finish exiting after the
/// call returns.
pub fn with_joined_pool<S, R>(
    builder: ThreadPoolBuilder<S>,
    f: impl FnOnce(&ThreadPool) -> R,
) -> Result<R, ThreadPoolBuildError> {
    let pool = JoinedPool::build(builder)?;
    Ok(f(&pool))
}

/// A pool whose threads are all joined when it is dropped (see
/// [`with_joined_pool`], for a pool that outlives one call).
#[derive(Debug)]
pub struct JoinedPool {
    pool: Option<ThreadPool>,
    handles: Vec<JoinHandle<()>>,
}

impl JoinedPool {
    /// Builds the pool `builder` describes.
    pub fn build<S>(builder: ThreadPoolBuilder<S>) -> Result<JoinedPool, ThreadPoolBuildError> {
        let handles: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());
        let pool = builder
            .spawn_handler(|t| {
                let mut b = std::thread::Builder::new();
                if let Some(name) = t.name() {
                    b = b.name(name.to_owned());
                }
                if let Some(size) = t.stack_size() {
                    b = b.stack_size(size);
                }
                let h = b.spawn(move || t.run())?;
                handles.lock().unwrap_or_else(|e| e.into_inner()).push(h);
                Ok(())
            })
            .build()?;
        Ok(JoinedPool {
            pool: Some(pool),
            handles: handles.into_inner().unwrap_or_else(|e| e.into_inner()),
        })
    }
}

impl std::ops::Deref for JoinedPool {
    type Target = ThreadPool;

    fn deref(&self) -> &ThreadPool {
        // Some until dropped.
        self.pool.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for JoinedPool {
    fn drop(&mut self) {
        drop(self.pool.take());
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}
