//! The collection's small files: the MANIFEST (the commit point), the
//! tombstone file (keys dead in sealed segments), segment file names, and
//! the removal of files no manifest needs.

use super::config::ConfigFile;
use super::part::Part;
use crate::durable::write_durably;
use crate::envelope::{self, FileKind, BLOOM, TOMBSTONES, WAL};
use crate::error::{io, Result, StoreError};
use crate::fault;
use crate::payload::{Field, FieldType, Schema};
use crate::wal;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) const MANIFEST: &str = "MANIFEST";
pub(crate) const LOCK: &str = "LOCK";
pub(crate) const MANIFEST_FORMAT: u32 = 1;
/// Bytes of a tombstone file before its entries: the envelope's prefix,
/// a zero u32 and the entry count u64.
const TOMB_HEADER_LEN: usize = 24;

/// File name of segment `id`.
pub(crate) fn segment_file(id: u64) -> String {
    format!("seg-{id:06}.sgt")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SegmentEntry {
    pub id: u64,
    pub file: String,
    pub vectors: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub format: u32,
    pub generation: u64,
    pub config: ConfigFile,
    pub segments: Vec<SegmentEntry>,
    pub tombstones: Option<String>,
    /// A bloom file holding every key of the segments.
    pub bloom: Option<String>,
    /// Or one holding the keys of every segment but some (a commit need
    /// not rewrite the whole filter, see `commit.rs`); `bloom` is then
    /// null, so a build that does not know this field rebuilds its filter
    /// from the segments rather than trust one that lacks keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bloom_partial: Option<PartialBloom>,
    /// Every WAL record up to this sequence number is in the segments.
    pub wal_seq: u64,
    pub next_segment_id: u64,
    /// Payload columns, in order (absent in manifests written before
    /// payloads existed).
    #[serde(default)]
    pub payload: Vec<ManifestField>,
}

/// A bloom file and the segments whose keys it may lack.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PartialBloom {
    pub file: String,
    pub missing: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ManifestField {
    name: String,
    #[serde(rename = "type")]
    ty: String,
}

impl Manifest {
    /// The bloom file named, complete or partial.
    pub fn bloom_file(&self) -> Option<&str> {
        self.bloom
            .as_deref()
            .or(self.bloom_partial.as_ref().map(|p| p.file.as_str()))
    }

    /// Segments whose keys the bloom file may lack.
    pub fn bloom_missing(&self) -> &[u64] {
        self.bloom_partial
            .as_ref()
            .map_or(&[], |p| p.missing.as_slice())
    }

    /// The payload schema recorded in the manifest.
    pub fn schema(&self, dir: &Path) -> Result<Schema> {
        let fields = self
            .payload
            .iter()
            .map(|f| {
                FieldType::parse(&f.ty).map(|ty| Field {
                    name: f.name.clone(),
                    ty,
                })
            })
            .collect::<Option<Vec<_>>>();
        fields
            .and_then(|f| Schema::new(f).ok())
            .ok_or_else(|| StoreError::Corrupt {
                file: dir.join(MANIFEST),
                offset: 0,
                reason: "invalid payload schema in manifest".into(),
            })
    }

    pub fn set_schema(&mut self, s: &Schema) {
        self.payload = s
            .fields()
            .iter()
            .map(|f| ManifestField {
                name: f.name.clone(),
                ty: f.ty.name().into(),
            })
            .collect();
    }

    /// Writes the manifest durably (tmp, fsync, rename, fsync dir).
    pub fn write(&self, dir: &Path) -> Result<()> {
        self.publish(dir)?;
        crate::durable::sync_dir(&dir.join(MANIFEST))
    }

    /// Puts the manifest in place (tmp, fsync, rename): the commit point
    /// of every change to the segment list. The caller syncs the
    /// directory before it removes any file the old manifest named.
    pub fn publish(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST);
        let mut body = serde_json::to_vec_pretty(self)
            .map_err(|e| StoreError::Config(format!("cannot serialise the manifest: {e}")))?;
        body.push(b'\n');
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(format!("crc32c:{crc:08x}\n").as_bytes());
        crate::durable::replace(&path, &body)
    }

    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let bytes = match fault::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotACollection {
                    dir: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(io("read", &path)(e)),
        };
        Manifest::parse(&path, &bytes)
    }

    /// Parses and checks manifest bytes (`path` names them in errors).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Manifest> {
        let path = path.to_path_buf();
        let corrupt = |offset: usize, reason: String| StoreError::Corrupt {
            file: path.clone(),
            offset: offset as u64,
            reason,
        };
        let text =
            std::str::from_utf8(bytes).map_err(|e| corrupt(e.valid_up_to(), "not UTF-8".into()))?;
        let at = text
            .rfind("crc32c:")
            .ok_or_else(|| corrupt(bytes.len(), "no checksum line".into()))?;
        let want = u32::from_str_radix(text[at + 7..].trim(), 16)
            .map_err(|_| corrupt(at, "bad checksum line".into()))?;
        if crc32c::crc32c(&bytes[..at]) != want {
            return Err(corrupt(at, "checksum mismatch".into()));
        }
        let m: Manifest = serde_json::from_slice(&bytes[..at])
            .map_err(|e| corrupt(0, format!("bad manifest: {e}")))?;
        if m.format != MANIFEST_FORMAT {
            return Err(StoreError::UnsupportedVersion {
                file: path,
                found: m.format,
                oldest: MANIFEST_FORMAT,
                newest: MANIFEST_FORMAT,
            });
        }
        Ok(m)
    }
}

/// Writes the dead keys of `parts` (sealed ones) as a tombstone file.
pub(crate) fn write_tombstones(path: &Path, parts: &[Arc<Part>]) -> Result<()> {
    let mut entries: Vec<(u64, u64)> = parts
        .iter()
        .flat_map(|s| {
            let d = s.dead();
            d.keys.iter().map(|&k| (s.id, k)).collect::<Vec<_>>()
        })
        .collect();
    entries.sort_unstable();
    let mut b = Vec::with_capacity(TOMB_HEADER_LEN + entries.len() * 16 + envelope::TRAILER_LEN);
    TOMBSTONES.begin(&mut b);
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    debug_assert_eq!(b.len(), TOMB_HEADER_LEN);
    for (id, k) in entries {
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&k.to_le_bytes());
    }
    envelope::seal(&mut b);
    write_durably(path, &b)
}

/// Reads a tombstone file: dead keys by segment id.
pub(crate) fn read_tombstones(path: &Path) -> Result<HashMap<u64, Vec<u64>>> {
    let b = fault::read(path).map_err(io("read", path))?;
    let bad = |offset: usize, reason: &str| StoreError::Corrupt {
        file: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.into(),
    };
    TOMBSTONES.version(path, &b)?;
    let body = envelope::unseal(path, &b)?;
    if body.len() < TOMB_HEADER_LEN {
        return Err(bad(body.len(), "shorter than the tombstone header"));
    }
    let u64_at = |o: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&body[o..o + 8]);
        u64::from_le_bytes(x)
    };
    let n = u64_at(16) as usize;
    if body.len() != TOMB_HEADER_LEN.saturating_add(n.saturating_mul(16)) {
        return Err(bad(16, "entry count does not match the file size"));
    }
    let mut out: HashMap<u64, Vec<u64>> = HashMap::new();
    for i in 0..n {
        let at = TOMB_HEADER_LEN + 16 * i;
        out.entry(u64_at(at)).or_default().push(u64_at(at + 8));
    }
    Ok(out)
}

fn ours(name: &str) -> bool {
    name.ends_with(".tmp")
        || (name.starts_with("seg-") && name.ends_with(".sgt"))
        || (name.starts_with("tomb-") && name.ends_with(".bin"))
        || (name.starts_with("bloom-") && name.ends_with(".bin"))
}

/// At open (writer, before any background work starts): removes `*.tmp`
/// files and segment / tombstone / bloom files the manifest does not name
/// (leftovers of an interrupted flush, build or merge), and obsolete logs.
pub(crate) fn remove_leftovers(dir: &Path, m: &Manifest) -> Result<()> {
    let keep: HashSet<&str> = m
        .segments
        .iter()
        .map(|s| s.file.as_str())
        .chain(m.tombstones.as_deref())
        .chain(m.bloom_file())
        .collect();
    let rd = std::fs::read_dir(dir).map_err(io("list", dir))?;
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if ours(&name) && !keep.contains(name.as_str()) {
            fault::remove(&e.path()).map_err(io("remove", &e.path()))?;
        }
    }
    remove_obsolete_logs(dir, m.wal_seq)
}

/// Removes the files an old manifest named and the new one does not (after
/// a commit). Files nobody named yet (a build in progress) are left alone.
pub(crate) fn remove_replaced(dir: &Path, old: &Manifest, new: &Manifest) -> Result<()> {
    let keep: HashSet<&str> = new
        .segments
        .iter()
        .map(|s| s.file.as_str())
        .chain(new.tombstones.as_deref())
        .chain(new.bloom_file())
        .collect();
    let named = old
        .segments
        .iter()
        .map(|s| s.file.as_str())
        .chain(old.tombstones.as_deref())
        .chain(old.bloom_file());
    for name in named {
        if !keep.contains(name) {
            let p = dir.join(name);
            match fault::remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove", &p)(e)),
            }
        }
    }
    remove_obsolete_logs(dir, new.wal_seq)
}

/// WAL files in `dir`, by first sequence number.
pub(crate) fn logs(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut logs: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map_err(io("list", dir))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            wal::parse_name(&name).map(|s| (s, e.path()))
        })
        .collect();
    logs.sort();
    Ok(logs)
}

/// The logs in `dir` split into the ones still to replay and the obsolete
/// ones. A log is obsolete when the next one starts at or before
/// `wal_seq + 1`: all its records are then in segments. The last log is
/// never obsolete.
pub(crate) fn split_logs(dir: &Path, wal_seq: u64) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let wals = logs(dir)?;
    let (mut live, mut obsolete) = (Vec::new(), Vec::new());
    for (i, (_, path)) in wals.iter().enumerate() {
        let next_first = wals.get(i + 1).map(|w| w.0);
        if next_first.is_some_and(|n| n <= wal_seq + 1) {
            obsolete.push(path.clone());
        } else {
            live.push(path.clone());
        }
    }
    Ok((live, obsolete))
}

fn remove_obsolete_logs(dir: &Path, wal_seq: u64) -> Result<()> {
    for path in split_logs(dir, wal_seq)?.1 {
        fault::remove(&path).map_err(io("remove", &path))?;
    }
    Ok(())
}

/// Refuses a directory holding any file of a format version this build
/// does not read, other than the segments (which [`Segment::open`] checks
/// as it maps them, before this): the manifest (already read into `m`),
/// the tombstones and bloom filter it names, and every log. Reads only the
/// files' first bytes, and runs before a writer creates its lock or
/// removes anything, so an older build leaves a newer directory as it
/// found it. The first refusal in file order is returned.
///
/// [`Segment::open`]: crate::segment::Segment::open
pub(crate) fn check_versions(dir: &Path, m: &Manifest) -> Result<()> {
    let mut files: Vec<(&FileKind, PathBuf)> = (m.tombstones.iter())
        .map(|t| (&TOMBSTONES, dir.join(t)))
        .chain(m.bloom_file().map(|b| (&BLOOM, dir.join(b))))
        .collect();
    files.extend(logs(dir)?.into_iter().map(|(_, path)| (&WAL, path)));
    on_io_threads(&files, |(kind, path)| kind.refuse_unreadable(path)).map(|_| ())
}

/// `f` of each of `items`, several at once: work that mostly waits for a
/// disk read on a cold open (mapping a segment and checking its header,
/// reading a file's version), whose reads go out together this way (one
/// after another, or two at a time on the search pool, they took most of
/// the 46-64 ms that opening 103 segments took). Each thread takes the
/// next item not yet taken. Results are in item order; the first error in
/// item order is returned. Few items are done on the calling thread.
pub(crate) fn on_io_threads<I: Sync, T: Send>(
    items: &[I],
    f: impl Fn(&I) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    if items.len() <= 4 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let mut all: Vec<(usize, Result<T>)> = std::thread::scope(|s| {
        // Threads that cannot start leave their share to the others and
        // to this one.
        let threads: Vec<_> = (1..IO_THREADS.min(items.len()))
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("sagitta-open".into())
                    .spawn_scoped(s, work)
                    .ok()
            })
            .collect();
        let mut all = work();
        for t in threads {
            all.extend(t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// Threads of [`on_io_threads`] (reads in flight at once).
const IO_THREADS: usize = 16;
