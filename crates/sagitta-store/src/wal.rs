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
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

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
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io("read", path))?;
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

/// An open log being appended to.
#[derive(Debug)]
pub struct Wal {
    file: File,
    path: PathBuf,
    len: u64,
    /// Bytes written since the last fsync.
    dirty: bool,
}

impl Wal {
    /// Creates a new, empty log durably (file and directory entry synced).
    pub fn create(dir: &Path, first_seq: u64) -> Result<Wal> {
        let path = dir.join(file_name(first_seq));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .map_err(io("create", &path))?;
        let mut h = Vec::with_capacity(HEADER_LEN as usize);
        WAL.begin(&mut h);
        h.extend_from_slice(&0u32.to_le_bytes());
        debug_assert_eq!(h.len() as u64, HEADER_LEN);
        file.write_all(&h).map_err(io("write", &path))?;
        file.sync_all().map_err(io("fsync", &path))?;
        crate::segment::sync_dir(&path)?;
        Ok(Wal {
            file,
            path,
            len: HEADER_LEN,
            dirty: false,
        })
    }

    /// Opens an existing log for appending after its valid prefix,
    /// cutting any torn tail (and syncing the cut).
    pub fn open_append(path: &Path, valid_len: u64) -> Result<Wal> {
        let mut file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io("open", path))?;
        let actual = file.metadata().map_err(io("stat", path))?.len();
        if actual != valid_len {
            file.set_len(valid_len).map_err(io("truncate", path))?;
            file.sync_all().map_err(io("fsync", path))?;
        }
        if valid_len >= HEADER_LEN {
            // A version-1 log is upgraded in place (version 2 only adds an
            // op), so records with payload may follow the old ones.
            let mut h = [0u8; 4];
            file.seek(SeekFrom::Start(8)).map_err(io("seek", path))?;
            let mut r = File::open(path).map_err(io("open", path))?;
            r.seek(SeekFrom::Start(8)).map_err(io("seek", path))?;
            r.read_exact(&mut h).map_err(io("read", path))?;
            if u32::from_le_bytes(h) < WAL.newest {
                file.write_all(&WAL.newest.to_le_bytes())
                    .map_err(io("write", path))?;
                file.sync_all().map_err(io("fsync", path))?;
            }
        }
        file.seek(SeekFrom::Start(valid_len))
            .map_err(io("seek", path))?;
        Ok(Wal {
            file,
            path: path.to_path_buf(),
            len: valid_len,
            dirty: false,
        })
    }

    /// Appends encoded records (one `write` call).
    pub fn append(&mut self, records: &[u8]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.write_all(records) {
            // Leave no partial record behind for later appends to follow.
            let _ = self.file.set_len(self.len);
            let _ = self.file.seek(SeekFrom::Start(self.len));
            return Err(io("write", &self.path)(e));
        }
        self.len += records.len() as u64;
        self.dirty = true;
        Ok(())
    }

    /// Makes everything appended so far durable.
    pub fn sync(&mut self) -> Result<()> {
        if self.dirty {
            self.file.sync_data().map_err(io("fsync", &self.path))?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Whether bytes were appended since the last sync.
    pub fn is_dirty(&self) -> bool {
        self.dirty
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
        let mut w = Wal::create(dir.path(), 1).unwrap();
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
        let mut w = Wal::open_append(&path, r.valid_len).unwrap();
        let mut buf = Vec::new();
        encode(&mut buf, 5, Op::Put, 99, &[1; 12]);
        w.append(&buf).unwrap();
        let r = read(&path).unwrap();
        assert_eq!(r.records().count(), 5);
        assert!(!r.torn);
    }
}
