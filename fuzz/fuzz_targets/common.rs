//! Helpers the targets share: scratch files on a RAM disk, and checksums
//! patched so that mutated bytes reach the parsers behind them.
#![allow(dead_code)]

use std::path::PathBuf;

/// A per-process scratch directory (on /dev/shm when there is one).
pub fn scratch() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("sagitta-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Writes `bytes` to `name` in the scratch directory.
pub fn file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, bytes).expect("scratch file");
    p
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Recomputes a segment's section, table and header checksums (see
/// docs/FORMAT.md), where the bytes hold them.
pub fn patch_segment(b: &mut [u8]) {
    if b.len() < 128 {
        return;
    }
    let nsec = (u32_at(b, 44).unwrap_or(0) as usize).min(64);
    for i in 0..nsec {
        let e = 128 + 32 * i;
        let (Some(off), Some(len)) = (u64_at(b, e + 8), u64_at(b, e + 16)) else {
            break;
        };
        let (off, len) = (off as usize, len as usize);
        if let Some(end) = off.checked_add(len).filter(|&end| end <= b.len()) {
            let c = crc32c::crc32c(&b[off..end]);
            if e + 28 <= b.len() {
                b[e + 24..e + 28].copy_from_slice(&c.to_le_bytes());
            }
        }
    }
    if let Some(table) = b.get(128..128 + nsec * 32) {
        let c = crc32c::crc32c(table);
        b[120..124].copy_from_slice(&c.to_le_bytes());
    }
    let c = crc32c::crc32c(&b[..124]);
    b[124..128].copy_from_slice(&c.to_le_bytes());
}

/// Replaces the last four bytes with the CRC32C of the rest (the trailer
/// of bloom and tombstone files).
pub fn patch_trailer(b: &mut [u8]) {
    if b.len() < 4 {
        return;
    }
    let n = b.len() - 4;
    let c = crc32c::crc32c(&b[..n]);
    b[n..].copy_from_slice(&c.to_le_bytes());
}

/// Recomputes the CRC32C of each record of a write-ahead log (after its
/// 16-byte header: `len u32 | crc32c u32 | payload`, see
/// `sagitta_store::wal`), up to the first one cut short.
pub fn patch_wal(b: &mut [u8]) {
    let mut at = 16;
    while let Some(len) = u32_at(b, at) {
        let Some(end) = (at + 8).checked_add(len as usize).filter(|&e| e <= b.len()) else {
            break;
        };
        let c = crc32c::crc32c(&b[at + 8..end]);
        b[at + 4..at + 8].copy_from_slice(&c.to_le_bytes());
        at = end;
    }
}

/// Replaces (or adds) the `crc32c:` line of a MANIFEST.
pub fn patch_manifest(b: &[u8]) -> Vec<u8> {
    let body = match b.windows(7).rposition(|w| w == b"crc32c:") {
        Some(at) => &b[..at],
        None => b,
    };
    let mut out = body.to_vec();
    let c = crc32c::crc32c(body);
    out.extend_from_slice(format!("crc32c:{c:08x}\n").as_bytes());
    out
}

/// Lets panics that the code under test catches itself (Sagitta turns a
/// panic inside Arrow's IPC reader into a typed error, see
/// `sagitta_store::ipc`) be caught: libfuzzer-sys's hook aborts on every
/// panic, caught or not. An uncaught panic still ends the run as a crash
/// (libfuzzer-sys aborts when the target unwinds).
pub fn allow_caught_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}
