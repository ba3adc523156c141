//! The write-ahead log of a collection.
//!
//! One file per generation, `wal-{first_seq:020}.log`: a 16-byte header
//! (magic `SGTAWAL\0`, version u32, zero u32) and then records
//! `len u32 | crc32c u32 | payload` where the payload is
//! `seq u64 | op u8 | key u64 | body` and the CRC covers the payload.
//! The body of a put (op 1) is the stored vector; of a put with payload
//! columns (op 3, version 2) the stored vector followed by the row in the
//! self-describing encoding of `payload::encode_row`; a remove (op 2) has
//! none. Version-1 logs (ops 1 and 2 only) are still read. Vectors are logged in stored (encoded) form, so replay
//! neither re-validates nor re-normalises. A record that is cut short or
//! fails its checksum ends the log: it is a torn tail from a crash during
//! the write, never data (writers truncate it away on open).

use crate::envelope::WAL;
use crate::error::{io, Result};
use crate::fault;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Bytes per `write` call of an append.
const WRITE_PIECE: usize = 256 << 10;
/// Header bytes at the start of every log file.
pub const HEADER_LEN: u64 = 16;
const FIXED: usize = 8 + 1 + 8;
/// Largest payload accepted (a 65536-d f32 vector plus the fixed part).
const MAX_PAYLOAD: usize = FIXED + 65_536 * 4 + crate::payload::MAX_ROW_BYTES;

/// What a record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Insert or replace the key with the logged vector.
    Put = 1,
    /// Delete the key.
    Remove = 2,
    /// Insert or replace the key with the logged vector and payload row.
    PutPayload = 3,
}

/// One decoded record, borrowing the vector from the log buffer.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Sequence number (strictly increasing across the collection).
    pub seq: u64,
    /// What it does.
    pub op: Op,
    /// The key.
    pub key: u64,
    /// The body: stored vector bytes (then the payload row for
    /// `PutPayload`; empty for `Remove`).
    pub vector: &'a [u8],
}

/// File name of the log whose first record is `first_seq`.
pub fn file_name(first_seq: u64) -> String {
    format!("wal-{first_seq:020}.log")
}

/// The first sequence number encoded in a log file name, if it is one.
pub fn parse_name(name: &str) -> Option<u64> {
    name.strip_prefix("wal-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// Appends one record to `buf`.
pub fn encode(buf: &mut Vec<u8>, seq: u64, op: Op, key: u64, vector: &[u8]) {
    let len = FIXED + vector.len();
    let start = buf.len();
    buf.extend_from_slice(&(len as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.push(op as u8);
    buf.extend_from_slice(&key.to_le_bytes());
    buf.extend_from_slice(vector);
    let crc = crc32c::crc32c(&buf[start + 8..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The records of a log held in memory, and where the valid part ends.
#[derive(Debug)]
pub struct Replay {
    /// The whole file.
    pub bytes: Vec<u8>,
    /// Offsets of valid records.
    offsets: Vec<usize>,
    /// Length of the valid prefix (header + whole records).
    pub valid_len: u64,
    /// Whether bytes after the valid prefix were found (a torn tail).
    pub torn: bool,
}

impl Replay {
    /// Decoded records in log order.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> + '_ {
        self.offsets.iter().map(|&o| {
            let b = &self.bytes;
            let len = u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]) as usize;
            let p = &b[o + 8..o + 8 + len];
            let mut s = [0u8; 8];
            s.copy_from_slice(&p[..8]);
            let mut k = [0u8; 8];
            k.copy_from_slice(&p[9..17]);
            Record {
                seq: u64::from_le_bytes(s),
                op: match p[8] {
                    2 => Op::Remove,
                    3 => Op::PutPayload,
                    _ => Op::Put,
                },
                key: u64::from_le_bytes(k),
                vector: &p[FIXED..],
            }
        })
    }
}

/// Reads a log file, stopping at the first torn or corrupt record.
/// A file shorter than its header (a crash while creating it) reads as
/// empty and torn; a wrong magic is `Corrupt`, a version this build does
/// not read `UnsupportedVersion` (see [`crate::envelope`]).
pub fn read(path: &Path) -> Result<Replay> {
    let bytes = fault::read(path).map_err(io("read", path))?;
    if bytes.len() < HEADER_LEN as usize {
        return Ok(Replay {
            torn: !bytes.is_empty(),
            bytes,
            offsets: Vec::new(),
            valid_len: 0,
        });
    }
    let version = WAL.version(path, &bytes)?;
    let mut at = HEADER_LEN as usize;
    let mut offsets = Vec::new();
    let mut last_seq = 0u64;
    while at + 8 <= bytes.len() {
        let len =
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let crc = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        if !(FIXED..=MAX_PAYLOAD).contains(&len) || at + 8 + len > bytes.len() {
            break;
        }
        let payload = &bytes[at + 8..at + 8 + len];
        if crc32c::crc32c(payload) != crc
            || !(matches!(payload[8], 1 | 2) || (payload[8] == 3 && version >= 2))
        {
            break;
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(&payload[..8]);
        let seq = u64::from_le_bytes(s);
        if seq <= last_seq {
            break;
        }
        last_seq = seq;
        offsets.push(at);
        at += 8 + len;
    }
    Ok(Replay {
        torn: at != bytes.len(),
        bytes,
        offsets,
        valid_len: at as u64,
    })
}

/// What a failed fsync means for the records appended since the last
/// good one (set by the collection's durability policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsynced {
    /// Nobody was told they were stored (every write call syncs before it
    /// returns): they are cut from the file.
    Drop,
    /// They were acknowledged (a background sync): the log keeps a copy
    /// and writes them again after cutting the file back.
    Keep,
    /// They were acknowledged without a promise of durability (no fsync
    /// policy): they stay where they are.
    Trust,
}

/// An open log being appended to.
///
/// A failed `write` or `fsync` poisons it: what the file holds past the
/// last good fsync is then unknown (a failed fsync may have dropped dirty
/// pages that a later fsync would report clean, the "fsyncgate" case), so
/// nothing is appended until the file is repaired: cut back to its last
/// durable length, that cut synced, and the kept records (see
/// [`Unsynced`]) written and synced again. Every append and sync retries
/// the repair first, so writes resume by themselves once the fault is
/// gone, and a failed fsync is never taken for a good one.
#[derive(Debug)]
pub struct Wal {
    file: File,
    path: PathBuf,
    /// Bytes in the file that hold accepted records.
    len: u64,
    /// Bytes known durable (the last good fsync).
    synced: u64,
    policy: Unsynced,
    /// With [`Unsynced::Keep`]: the bytes `synced..len`.
    kept: Vec<u8>,
    poisoned: bool,
}

impl Wal {
    /// Creates a new, empty log durably (file and directory entry synced).
    /// On failure the file is removed again (best effort; an incomplete
    /// log reads as empty).
    pub fn create(dir: &Path, first_seq: u64, policy: Unsynced) -> Result<Wal> {
        let path = dir.join(file_name(first_seq));
        let r = (|| {
            let mut file = fault::create(&path)?;
            let mut h = Vec::with_capacity(HEADER_LEN as usize);
            WAL.begin(&mut h);
            h.extend_from_slice(&0u32.to_le_bytes());
            debug_assert_eq!(h.len() as u64, HEADER_LEN);
            fault::write_all(&mut file, &h, &path)?;
            fault::sync_all(&file, &path)?;
            crate::durable::sync_dir(&path)?;
            Ok(file)
        })();
        match r {
            Ok(file) => Ok(Wal {
                file,
                path,
                len: HEADER_LEN,
                synced: HEADER_LEN,
                policy,
                kept: Vec::new(),
                poisoned: false,
            }),
            Err(e) => {
                let _ = fault::remove(&path);
                Err(e)
            }
        }
    }

    /// Opens an existing log for appending after its valid prefix,
    /// cutting any torn tail (and syncing the cut).
    pub fn open_append(path: &Path, valid_len: u64, policy: Unsynced) -> Result<Wal> {
        fault::check(fault::IoOp::Create, path).map_err(io("open", path))?;
        let mut file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io("open", path))?;
        let actual = file.metadata().map_err(io("stat", path))?.len();
        if actual != valid_len {
            fault::set_len(&file, valid_len, path)?;
            fault::sync_all(&file, path)?;
        }
        if valid_len >= HEADER_LEN {
            // A version-1 log is upgraded in place (version 2 only adds an
            // op), so records with payload may follow the old ones.
            let mut h = [0u8; 4];
            file.seek(SeekFrom::Start(8)).map_err(io("seek", path))?;
            let mut r = fault::open(path)?;
            r.seek(SeekFrom::Start(8)).map_err(io("seek", path))?;
            r.read_exact(&mut h).map_err(io("read", path))?;
            if u32::from_le_bytes(h) < WAL.newest {
                fault::write_all(&mut file, &WAL.newest.to_le_bytes(), path)?;
                fault::sync_all(&file, path)?;
            }
        }
        file.seek(SeekFrom::Start(valid_len))
            .map_err(io("seek", path))?;
        Ok(Wal {
            file,
            path: path.to_path_buf(),
            len: valid_len,
            synced: valid_len,
            policy,
            kept: Vec::new(),
            poisoned: false,
        })
    }

    /// Appends encoded records. On failure nothing of them counts, and the
    /// log is repaired before the next append.
    pub fn append(&mut self, records: &[u8]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.repair()?;
        // In pieces, giving way to searches between them (a batch of
        // megabytes is milliseconds of copying in one system call).
        let written = records.chunks(WRITE_PIECE).try_for_each(|piece| {
            sagitta_index::sched::foreground::step();
            fault::write_all(&mut self.file, piece, &self.path)
        });
        if let Err(e) = written {
            // Part of the records may be in the file: the repair cuts them.
            self.poisoned = true;
            return Err(e);
        }
        self.len += records.len() as u64;
        if self.policy == Unsynced::Keep {
            self.kept.extend_from_slice(records);
        }
        Ok(())
    }

    /// Makes everything appended so far durable. On failure the records
    /// appended since the last good sync are handled per the log's
    /// [`Unsynced`] policy (with `Drop`, they are gone: the caller must
    /// not apply them).
    pub fn sync(&mut self) -> Result<()> {
        self.repair()?;
        if self.len == self.synced {
            return Ok(());
        }
        if let Err(e) = fault::sync_data(&self.file, &self.path) {
            self.poisoned = true;
            if self.policy == Unsynced::Drop {
                self.len = self.synced;
            }
            return Err(e);
        }
        self.synced = self.len;
        self.kept.clear();
        Ok(())
    }

    /// After a failed write or fsync: cuts the file back to what is known
    /// good, syncs the cut, and writes the kept records again.
    fn repair(&mut self) -> Result<()> {
        if !self.poisoned {
            return Ok(());
        }
        let base = if self.policy == Unsynced::Trust {
            self.len
        } else {
            self.synced
        };
        fault::set_len(&self.file, base, &self.path)?;
        self.file
            .seek(SeekFrom::Start(base))
            .map_err(io("seek", &self.path))?;
        if self.policy != Unsynced::Trust {
            fault::sync_all(&self.file, &self.path)?;
            if !self.kept.is_empty() {
                fault::write_all(&mut self.file, &self.kept, &self.path)?;
                fault::sync_data(&self.file, &self.path)?;
                self.kept.clear();
            }
            self.synced = self.len;
        }
        self.poisoned = false;
        Ok(())
    }

    /// Whether bytes were appended since the last sync.
    pub fn is_dirty(&self) -> bool {
        self.len != self.synced || self.poisoned
    }

    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log holds no record.
    pub fn is_empty(&self) -> bool {
        self.len <= HEADER_LEN
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn append_read_and_torn_tails() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Wal::create(dir.path(), 1, Unsynced::Drop).unwrap();
        let mut buf = Vec::new();
        for i in 1..=10u64 {
            encode(&mut buf, i, Op::Put, i * 10, &[i as u8; 12]);
        }
        encode(&mut buf, 11, Op::Remove, 30, &[]);
        w.append(&buf).unwrap();
        w.sync().unwrap();
        let path = w.path().to_path_buf();
        let r = read(&path).unwrap();
        assert!(!r.torn);
        let recs: Vec<_> = r
            .records()
            .map(|r| (r.seq, r.op, r.key, r.vector.len()))
            .collect();
        assert_eq!(recs.len(), 11);
        assert_eq!(recs[10], (11, Op::Remove, 30, 0));
        assert_eq!(recs[2], (3, Op::Put, 30, 12));
        let full = std::fs::read(&path).unwrap();
        // Every cut point reads as a valid prefix plus a torn tail.
        for cut in HEADER_LEN as usize..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            let r = read(&path).unwrap();
            let n = r.records().count();
            assert!(n <= 11);
            assert_eq!(r.torn, r.valid_len as usize != cut);
        }
        // A flipped byte inside record 5 ends the log there.
        let mut bad = full.clone();
        let rec = (full.len() - HEADER_LEN as usize - 25) / 10;
        bad[HEADER_LEN as usize + 4 * rec + 12] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        let r = read(&path).unwrap();
        assert_eq!(r.records().count(), 4);
        assert!(r.torn);
        // Appending after the cut continues cleanly.
        let mut w = Wal::open_append(&path, r.valid_len, Unsynced::Drop).unwrap();
        let mut buf = Vec::new();
        encode(&mut buf, 5, Op::Put, 99, &[1; 12]);
        w.append(&buf).unwrap();
        let r = read(&path).unwrap();
        assert_eq!(r.records().count(), 5);
        assert!(!r.torn);
    }
}
