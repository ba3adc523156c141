//! What an API process reports with `serve --stats`: every interval, per
//! process, how long its requests took inside it (from the wake-up that
//! found them to their answer queued) and what the kernel charged it in
//! that time (page faults, context switches). Under the load test this
//! separates the process's own work from the time a request waited to be
//! scheduled, which only the client sees.

use std::time::{Duration, Instant};

/// How often a process prints its line.
pub const EVERY: Duration = Duration::from_secs(10);

/// One interval's figures.
pub struct Stats {
    since: Instant,
    /// Per answered request: µs from the wake-up that read it to its
    /// answer, and µs of its own work (parse, vector, search).
    waits: Vec<u32>,
    works: Vec<u32>,
    usage: Usage,
}

/// The counters of `getrusage` this report uses.
#[derive(Clone, Copy, Default)]
struct Usage {
    minor: i64,
    major: i64,
    voluntary: i64,
    involuntary: i64,
}

fn usage() -> Usage {
    // SAFETY: a zeroed rusage is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall on this process with a valid struct.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Usage::default();
    }
    Usage {
        minor: u.ru_minflt,
        major: u.ru_majflt,
        voluntary: u.ru_nvcsw,
        involuntary: u.ru_nivcsw,
    }
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

/// p50 / p99 / max of `v` (sorted in place), µs.
fn spread(v: &mut [u32]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_unstable();
    let at = |p: f64| v[((v.len() - 1) as f64 * p) as usize];
    format!("{}/{}/{}", at(0.5), at(0.99), v[v.len() - 1])
}

impl Stats {
    pub fn new(now: Instant) -> Stats {
        Stats {
            since: now,
            waits: Vec::new(),
            works: Vec::new(),
            usage: usage(),
        }
    }

    /// One answered request: woken at `woke`, its work began at `began`,
    /// answered now.
    pub fn record(&mut self, woke: Instant, began: Instant) {
        let now = Instant::now();
        self.waits.push(micros(now.duration_since(woke)));
        self.works.push(micros(now.duration_since(began)));
    }

    /// Prints and restarts the interval once [`EVERY`] has passed.
    pub fn tick(&mut self, now: Instant) {
        if now.duration_since(self.since) < EVERY {
            return;
        }
        let u = usage();
        if !self.works.is_empty() {
            eprintln!(
                "sagitta-fraud api {}: {} requests in {:.1} s; µs p50/p99/max: work {}, from wake-up {}; \
                 faults {} minor {} major; context switches {} voluntary {} involuntary",
                std::process::id(),
                self.works.len(),
                now.duration_since(self.since).as_secs_f64(),
                spread(&mut self.works),
                spread(&mut self.waits),
                u.minor - self.usage.minor,
                u.major - self.usage.major,
                u.voluntary - self.usage.voluntary,
                u.involuntary - self.usage.involuntary,
            );
        }
        self.works.clear();
        self.waits.clear();
        self.usage = u;
        self.since = now;
    }
}
