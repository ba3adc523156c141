//! `sagitta-fraud`: the Rinha de Backend 2026 fraud-scoring API on
//! Sagitta's certified exact low-dimensional kNN. See README.md.

mod fastpath;
mod fields;
mod http;
mod lb;
mod refs;
mod stats;
mod vectorize;
mod worker;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "sagitta-fraud",
    about = "Fraud scoring by exact 5-NN over labelled references (Rinha de Backend 2026)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the index directory from a references file (.json or .json.gz).
    Build {
        /// `references.json.gz`.
        refs: PathBuf,
        /// Output directory (index + constants).
        out: PathBuf,
        /// `normalization.json` (default: beside the references).
        #[arg(long)]
        normalization: Option<PathBuf>,
        /// `mcc_risk.json` (default: beside the references).
        #[arg(long)]
        mcc: Option<PathBuf>,
    },
    /// Start the load balancer and the API processes.
    Serve {
        /// The index directory `build` wrote.
        #[arg(long)]
        index: PathBuf,
        /// Port (0: any free port; the one bound is printed).
        #[arg(long, default_value_t = 9999)]
        port: u16,
        /// Address to bind.
        #[arg(long, default_value = "0.0.0.0")]
        bind: std::net::Ipv4Addr,
        /// API processes behind the balancer.
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Pin the balancer and every API process to this CPU.
        #[arg(long)]
        cpu: Option<usize>,
        /// Run everything under SCHED_FIFO at this priority (1-99).
        #[arg(long)]
        rtprio: Option<i32>,
        /// API processes poll for work instead of sleeping in the kernel
        /// (they own their core: it never idles, so a request never waits
        /// for it to wake up).
        #[arg(long)]
        busy_poll: bool,
        /// Close a connection whose request is not whole, or whose client
        /// does not take its answers, after this many milliseconds.
        #[arg(long, default_value_t = 10_000)]
        request_timeout_ms: u64,
        /// Close a keep-alive connection idle this many milliseconds.
        #[arg(long, default_value_t = 60_000)]
        idle_timeout_ms: u64,
        /// No balancer of ours: the API processes listen on
        /// `DIR/api-0.sock`, `DIR/api-1.sock`, ... for a balancer of your
        /// own (HAProxy, nginx) in front; `--port` and `--bind` are unused.
        #[arg(long, value_name = "DIR")]
        backends: Option<PathBuf>,
        /// A measurement floor, not a service: the same balancer and API
        /// processes answer every score request "approved, 0.0" without
        /// reading its body or searching (the index is checked, not
        /// mapped). `peer/peer.sh` runs it beside the service to show what
        /// the host and the transport cost under the load test.
        #[arg(long)]
        fixed_answer: bool,
        /// Each API process prints, every 10 s, its requests' time inside
        /// it (p50/p99/max), page faults and context switches.
        #[arg(long)]
        stats: bool,
        /// Stop when standard input closes (the parent exited; for tests).
        #[arg(long, hide = true)]
        die_with_parent: bool,
    },
    /// One API process (started by `serve`).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        index: PathBuf,
        /// The Unix socket the balancer sends connections on.
        #[arg(long, conflicts_with = "listen", required_unless_present = "listen")]
        fd: Option<RawFd>,
        /// A Unix socket path to listen on instead (`serve --backends`).
        #[arg(long)]
        listen: Option<PathBuf>,
        #[arg(long)]
        busy_poll: bool,
        #[arg(long)]
        fixed_answer: bool,
        #[arg(long)]
        stats: bool,
        #[arg(long)]
        request_timeout_ms: u64,
        #[arg(long)]
        idle_timeout_ms: u64,
    },
    /// Score every entry of a contest test file offline and compare with
    /// its expected answers; report the search cost per query.
    Check {
        #[arg(long)]
        index: PathBuf,
        /// `test-data-*.json.gz`.
        data: PathBuf,
        /// Also write each request's vector here, as 14 little-endian
        /// `i16` codes (value × 10⁴) per request (for peers' search benches).
        #[arg(long)]
        vectors: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Build {
            refs,
            out,
            normalization,
            mcc,
        } => build(&refs, &out, normalization, mcc),
        Cmd::Serve {
            index,
            port,
            bind,
            workers,
            cpu,
            rtprio,
            busy_poll,
            request_timeout_ms,
            idle_timeout_ms,
            backends,
            fixed_answer,
            stats,
            die_with_parent,
        } => {
            if die_with_parent {
                // Standard input closes when the parent exits; the API
                // processes follow this one (their death signal).
                std::thread::spawn(|| {
                    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
                    std::process::exit(0);
                });
            }
            let flags = WorkerFlags {
                busy_poll,
                fixed_answer,
                stats,
                timeouts: [request_timeout_ms, idle_timeout_ms],
            };
            if let Some(dir) = backends {
                return serve_backends(&index, &dir, workers, cpu, rtprio, flags);
            }
            serve(&index, bind, port, workers, cpu, rtprio, flags)
        }
        Cmd::Worker {
            index,
            fd,
            listen,
            busy_poll,
            fixed_answer,
            stats,
            request_timeout_ms,
            idle_timeout_ms,
        } => {
            // Die with the balancer.
            // SAFETY: plain prctl on this process.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
            let scorer = if fixed_answer {
                worker::Scorer::Fixed
            } else {
                worker::Scorer::new(refs::Mapped::open(&index, true)?)
            };
            let opts = worker::Options {
                busy: busy_poll,
                request_timeout: std::time::Duration::from_millis(request_timeout_ms),
                idle_timeout: std::time::Duration::from_millis(idle_timeout_ms),
                stats,
            };
            let source = match (fd, listen) {
                (Some(fd), _) => worker::Source::Balancer(fd),
                (None, Some(path)) => {
                    // Bound under a temporary name and renamed once it
                    // listens: whoever sees the path can connect to it
                    // (between bind and listen a connect is refused).
                    let mut tmp = path.clone().into_os_string();
                    tmp.push(format!(".{}.tmp", std::process::id()));
                    let tmp = PathBuf::from(tmp);
                    let _ = std::fs::remove_file(&tmp);
                    let l = std::os::unix::net::UnixListener::bind(&tmp)
                        .with_context(|| format!("listen on {}", tmp.display()))?;
                    std::fs::rename(&tmp, &path).with_context(|| {
                        format!("rename {} to {}", tmp.display(), path.display())
                    })?;
                    l.set_nonblocking(true)?;
                    worker::Source::Listener(std::os::fd::IntoRawFd::into_raw_fd(l))
                }
                (None, None) => bail!("give --fd or --listen"),
            };
            worker::run(source, scorer, opts)
        }
        Cmd::Check {
            index,
            data,
            vectors,
        } => check(&index, &data, vectors.as_deref()),
    }
}

fn beside(refs: &Path, name: &str) -> PathBuf {
    refs.parent().unwrap_or(Path::new(".")).join(name)
}

fn build(refs_path: &Path, out: &Path, norms: Option<PathBuf>, mcc: Option<PathBuf>) -> Result<()> {
    let norms = norms.unwrap_or_else(|| beside(refs_path, "normalization.json"));
    let mcc = mcc.unwrap_or_else(|| beside(refs_path, "mcc_risk.json"));
    vectorize::read_rules(&norms, &mcc)?;
    let t = Instant::now();
    let r = refs::read(refs_path)?;
    let read_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let index = refs::build(&r, (&norms, &mcc), out)?;
    println!(
        "{} references ({} fraud) read in {read_s:.1} s, index built and written in {:.1} s: {} ({} bytes)",
        r.labels.len(),
        r.labels.iter().filter(|&&l| l == refs::FRAUD).count(),
        t.elapsed().as_secs_f64(),
        refs::index_file(out).display(),
        index.as_bytes().len()
    );
    Ok(())
}

fn set_cpu(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and the syscall take
    // valid pointers.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) < 0 {
            bail!(
                "sched_setaffinity({cpu}): {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

fn set_fifo(prio: i32) -> Result<()> {
    let p = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: plain syscall on this process.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } < 0 {
        bail!(
            "SCHED_FIFO priority {prio}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// What `serve` passes on to each API process it starts.
#[derive(Debug, Clone, Copy)]
struct WorkerFlags {
    busy_poll: bool,
    fixed_answer: bool,
    stats: bool,
    /// Request and idle timeouts, milliseconds.
    timeouts: [u64; 2],
}

fn serve(
    index: &Path,
    bind: std::net::Ipv4Addr,
    port: u16,
    workers: usize,
    cpu: Option<usize>,
    rtprio: Option<i32>,
    flags: WorkerFlags,
) -> Result<()> {
    let exe = prepare(index, workers, cpu, rtprio)?;
    let (listener, port) = lb::listen(bind, port)?;
    let mut socks = Vec::new();
    let mut children = Vec::new();
    for _ in 0..workers {
        let mut pair = [0 as RawFd; 2];
        // SAFETY: plain syscalls on descriptors created here.
        unsafe {
            if libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            ) < 0
            {
                bail!("socketpair: {}", std::io::Error::last_os_error());
            }
            // The child's end survives exec; ours does not.
            libc::fcntl(pair[1], libc::F_SETFD, 0);
        }
        let child = worker_command(&exe, index, flags)
            .arg("--fd")
            .arg(pair[1].to_string())
            .spawn()
            .context("start an API process")?;
        // SAFETY: the child has its copy.
        unsafe { libc::close(pair[1]) };
        socks.push(pair[0]);
        children.push(child);
    }
    println!("sagitta-fraud: listening on {bind}:{port} ({workers} API processes)");
    std::io::stdout().flush()?;
    let r = lb::run(listener, &socks);
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    r
}

/// What `serve` does before it starts the API processes: checks the
/// arguments and the index (a bad one fails the command at once; the
/// balancer keeps nothing of it mapped), pins and raises this process
/// (the API processes inherit both); returns this executable.
fn prepare(
    index: &Path,
    workers: usize,
    cpu: Option<usize>,
    rtprio: Option<i32>,
) -> Result<PathBuf> {
    if workers == 0 {
        bail!("--workers must be at least 1");
    }
    refs::check(index)?;
    if let Some(c) = cpu {
        set_cpu(c)?;
    }
    if let Some(p) = rtprio {
        set_fifo(p)?;
    }
    std::env::current_exe().context("current_exe")
}

/// An API process's command line, less where its connections come from.
fn worker_command(exe: &Path, index: &Path, flags: WorkerFlags) -> std::process::Command {
    let [request_timeout_ms, idle_timeout_ms] = flags.timeouts;
    let mut c = std::process::Command::new(exe);
    c.arg("worker")
        .arg("--index")
        .arg(index)
        .args(flags.busy_poll.then_some("--busy-poll"))
        .args(flags.fixed_answer.then_some("--fixed-answer"))
        .args(flags.stats.then_some("--stats"))
        .arg(format!("--request-timeout-ms={request_timeout_ms}"))
        .arg(format!("--idle-timeout-ms={idle_timeout_ms}"));
    c
}

/// `serve --backends DIR`: the API processes alone, each listening on
/// `DIR/api-{i}.sock`, until one of them stops.
fn serve_backends(
    index: &Path,
    dir: &Path,
    workers: usize,
    cpu: Option<usize>,
    rtprio: Option<i32>,
    flags: WorkerFlags,
) -> Result<()> {
    let exe = prepare(index, workers, cpu, rtprio)?;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut children = Vec::new();
    let mut paths = Vec::new();
    for i in 0..workers {
        let path = dir.join(format!("api-{i}.sock"));
        let _ = std::fs::remove_file(&path);
        let child = worker_command(&exe, index, flags)
            .arg("--listen")
            .arg(&path)
            .spawn()
            .context("start an API process")?;
        children.push(child);
        paths.push(path);
    }
    // Announce once every socket exists: each process binds its own and
    // gives it its name only once it listens.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !paths.iter().all(|p| p.exists()) {
        if std::time::Instant::now() > deadline {
            bail!("the API processes did not start listening");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    println!(
        "sagitta-fraud: API processes listening on {}",
        names.join(", ")
    );
    std::io::stdout().flush()?;
    let mut first = None;
    for mut c in children {
        let s = c.wait()?;
        first.get_or_insert(s);
    }
    bail!("an API process stopped: {first:?}")
}

/// A test-data entry in either of the contest's formats.
/// Mean, p50, p99 and max of times in µs (sorts them).
fn summary(times: &mut [f64]) -> String {
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
    format!(
        "mean {:.2} us, p50 {:.2} us, p99 {:.2} us, max {:.1} us",
        times.iter().sum::<f64>() / times.len() as f64,
        pct(0.5),
        pct(0.99),
        times[times.len() - 1],
    )
}

/// Reads and writes a line of every 4 KiB of `buf` and reads every other
/// line, evicting what the caches and the TLB held.
fn thrash(buf: &mut [u8]) {
    let mut acc = 0u8;
    for (i, b) in buf.iter_mut().enumerate().step_by(64) {
        acc = acc.wrapping_add(*b);
        if i % 4096 == 0 {
            *b = acc;
        }
    }
    std::hint::black_box(acc);
}

fn entries(data: &Path) -> Result<Vec<serde_json::Value>> {
    let file = std::fs::File::open(data).with_context(|| format!("open {}", data.display()))?;
    let v: serde_json::Value = if data.extension().is_some_and(|e| e == "gz") {
        serde_json::from_reader(std::io::BufReader::new(flate2::read::GzDecoder::new(file)))?
    } else {
        serde_json::from_reader(std::io::BufReader::new(file))?
    };
    match v.get("entries").and_then(|e| e.as_array()) {
        Some(e) => Ok(e.clone()),
        None => bail!("{}: no entries", data.display()),
    }
}

fn check(index: &Path, data: &Path, vectors: Option<&Path>) -> Result<()> {
    let mapped = refs::Mapped::open(index, true)?;
    let view = mapped.view;
    let rules = mapped.rules.clone();
    let mut scorer = worker::Scorer::new(mapped);
    let entries = entries(data)?;
    let (mut wrong_vectors, mut wrong_scores, mut wrong_decisions, mut fp, mut fn_) =
        (0, 0, 0, 0, 0);
    let mut times = Vec::with_capacity(entries.len());
    let mut queries = Vec::with_capacity(entries.len());
    for e in &entries {
        let req = e.get("request").context("entry without request")?;
        let body = serde_json::to_vec(req)?;
        let codes = vectorize::vectorize(&body, &rules).map_err(|e| anyhow::anyhow!("{e}"))?;
        queries.push(codes);
        let expected_score = e
            .get("expected_fraud_score")
            .or_else(|| e.pointer("/info/expected_response/fraud_score"))
            .and_then(|v| v.as_f64())
            .context("entry without an expected score")?;
        if let Some(want) = e.pointer("/info/vector").and_then(|v| v.as_array()) {
            let got = vectorize::as_f32(&codes);
            if want
                .iter()
                .zip(got)
                .any(|(w, g)| (w.as_f64().unwrap_or(f64::NAN) - f64::from(g)).abs() > 1e-6)
            {
                wrong_vectors += 1;
            }
        }
        let t = Instant::now();
        let frauds = scorer.frauds(&body).map_err(|e| anyhow::anyhow!(e))?;
        times.push(t.elapsed().as_nanos() as f64 / 1e3);
        let score = frauds as f64 / worker::K as f64;
        if (score - expected_score).abs() > 1e-9 {
            wrong_scores += 1;
        }
        let (approved, expected) = (score < 0.6, expected_score < 0.6);
        if approved != expected {
            wrong_decisions += 1;
            if approved {
                fn_ += 1;
            } else {
                fp += 1;
            }
        }
    }
    println!(
        "{} requests: {wrong_vectors} wrong vectors, {wrong_scores} wrong fraud scores, {wrong_decisions} wrong decisions ({fp} FP, {fn_} FN); parse + vectorize + exact 5-NN per request: {}",
        entries.len(),
        summary(&mut times),
    );
    // The search alone over the same vectors (a second pass, timed: the
    // first warms the branch predictors, as in a running service).
    let mut scratch = sagitta_lowdim::LowDimScratch::default();
    let mut search = Vec::with_capacity(queries.len());
    for pass in 0..2 {
        search.clear();
        for codes in &queries {
            let q = vectorize::as_f32(codes);
            let t = Instant::now();
            let hits = view.search(&q, worker::K, &mut scratch)?;
            std::hint::black_box(hits);
            if pass == 1 {
                search.push(t.elapsed().as_nanos() as f64 / 1e3);
            }
        }
    }
    println!(
        "exact 5-NN alone, the same vectors: {}",
        summary(&mut search)
    );
    // Each query twice in a row, the second timed: its nodes and leaves
    // in cache, the cost of the search's own work.
    let (mut nodes, mut leaves, mut rows) = (0u64, 0u64, 0u64);
    search.clear();
    for codes in &queries {
        let q = vectorize::as_f32(codes);
        std::hint::black_box(view.search(&q, worker::K, &mut scratch)?);
        let t = Instant::now();
        std::hint::black_box(view.search(&q, worker::K, &mut scratch)?);
        search.push(t.elapsed().as_nanos() as f64 / 1e3);
        nodes += scratch.stats.nodes;
        leaves += scratch.stats.leaves;
        rows += scratch.stats.rows;
    }
    let n = queries.len().max(1) as f64;
    println!(
        "exact 5-NN alone, each query run twice and the second timed: {}; per query {:.1} boxes, {:.2} leaves, {:.1} rows",
        summary(&mut search),
        nodes as f64 / n,
        leaves as f64 / n,
        rows as f64 / n,
    );
    // Cold: before each of the first COLD requests, 64 MiB of other memory
    // read (twice the last-level cache here), so neither the caches nor
    // the TLB hold the index, as for a request after the core ran
    // something else (the load test's client shares it).
    const COLD: usize = 1000;
    let mut evict = vec![1u8; 64 << 20];
    let mut whole = Vec::with_capacity(COLD);
    search.clear();
    for (e, codes) in entries.iter().zip(&queries).take(COLD) {
        let body = serde_json::to_vec(e.get("request").context("entry without request")?)?;
        thrash(&mut evict);
        let t = Instant::now();
        std::hint::black_box(scorer.frauds(&body).map_err(|e| anyhow::anyhow!(e))?);
        whole.push(t.elapsed().as_nanos() as f64 / 1e3);
        thrash(&mut evict);
        let q = vectorize::as_f32(codes);
        let t = Instant::now();
        std::hint::black_box(view.search(&q, worker::K, &mut scratch)?);
        search.push(t.elapsed().as_nanos() as f64 / 1e3);
    }
    println!(
        "cold (64 MiB read before each, {} requests): parse + vectorize + exact 5-NN {}; exact 5-NN alone {}",
        whole.len(),
        summary(&mut whole),
        summary(&mut search)
    );
    if let Some(path) = vectors {
        let bytes: Vec<u8> = queries
            .iter()
            .flat_map(|c| c.iter().flat_map(|x| x.to_le_bytes()))
            .collect();
        std::fs::write(path, bytes).with_context(|| format!("write {}", path.display()))?;
    }
    if wrong_scores > 0 || wrong_vectors > 0 {
        std::process::exit(1);
    }
    Ok(())
}
