//! The envelope every binary file of a collection shares: an 8-byte magic
//! naming the file kind, then a u32 format version, and CRC32C checksums
//! (of the whole file before a 4-byte trailer, or per header and section
//! or record where the kind says so; see docs/FORMAT.md). One reader of it
//! for segments, write-ahead logs, bloom filters and tombstone files, so
//! that every kind refuses a foreign file, a version it cannot read and
//! damaged bytes the same way, with the same typed errors.

use crate::error::StoreError;
use std::path::Path;

/// A binary file kind: its magic and the format versions this build reads
/// (`oldest..=newest`) and writes (`newest`).
#[derive(Debug)]
pub(crate) struct FileKind {
    /// What the kind is called in errors.
    pub name: &'static str,
    pub magic: &'static [u8; 8],
    pub oldest: u32,
    pub newest: u32,
}

/// Sealed segment files (`seg-*.sgt`).
pub(crate) const SEGMENT: FileKind = FileKind {
    name: "segment",
    magic: b"SGTASEG\0",
    oldest: 1,
    newest: 5,
};

/// Write-ahead logs (`wal-*.log`).
pub(crate) const WAL: FileKind = FileKind {
    name: "write-ahead log",
    magic: b"SGTAWAL\0",
    oldest: 1,
    newest: 3,
};

/// Bloom filters (`bloom-*.bin`).
pub(crate) const BLOOM: FileKind = FileKind {
    name: "bloom filter",
    magic: b"SGTABLM\0",
    oldest: 1,
    newest: 2,
};

/// Tombstone files (`tomb-*.bin`).
pub(crate) const TOMBSTONES: FileKind = FileKind {
    name: "tombstone",
    magic: b"SGTATMB\0",
    oldest: 1,
    newest: 1,
};

/// Bytes of the magic and version every file starts with.
pub(crate) const PREFIX_LEN: usize = 12;

/// Bytes of a whole-file CRC32C trailer.
pub(crate) const TRAILER_LEN: usize = 4;

impl FileKind {
    /// Starts a new file of this kind in `buf`: the magic and the version
    /// written.
    pub fn begin(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(self.magic);
        buf.extend_from_slice(&self.newest.to_le_bytes());
    }

    /// The version of a file of this kind that this build reads: `Corrupt`
    /// when `bytes` is too short for the prefix or has another kind's
    /// magic, `UnsupportedVersion` when its version is out of range.
    pub fn version(&self, path: &Path, bytes: &[u8]) -> Result<u32, StoreError> {
        if bytes.len() < PREFIX_LEN || bytes[..8] != self.magic[..] {
            return Err(StoreError::Corrupt {
                file: path.to_path_buf(),
                offset: 0,
                reason: format!("not a {} file (bad magic)", self.name),
            });
        }
        let v = u32_at(bytes, 8);
        if !(self.oldest..=self.newest).contains(&v) {
            return Err(StoreError::UnsupportedVersion {
                file: path.to_path_buf(),
                found: v,
                oldest: self.oldest,
                newest: self.newest,
            });
        }
        Ok(v)
    }
}

impl FileKind {
    /// Refuses the file at `path` when it is of this kind (its magic) and
    /// of a version this build does not read, reading only its first
    /// bytes. Anything else (a missing, short, foreign or damaged file)
    /// passes: the full read reports it. Run before anything is created or
    /// removed in a directory, so that an older build leaves a newer
    /// directory exactly as it was.
    pub fn refuse_unreadable(&self, path: &Path) -> Result<(), StoreError> {
        use std::io::Read;
        let mut prefix = Vec::with_capacity(PREFIX_LEN);
        let read = std::fs::File::open(path)
            .and_then(|f| f.take(PREFIX_LEN as u64).read_to_end(&mut prefix));
        match read {
            Ok(PREFIX_LEN) if prefix[..8] == self.magic[..] => {
                self.version(path, &prefix).map(|_| ())
            }
            _ => Ok(()),
        }
    }
}

/// Ends a file checksummed whole: appends the CRC32C of all of `buf`.
pub(crate) fn seal(buf: &mut Vec<u8>) {
    let crc = crc32c::crc32c(buf);
    buf.extend_from_slice(&crc.to_le_bytes());
}

/// The bytes of a file checksummed whole, without its trailer, once the
/// trailer matches them (`Corrupt` otherwise, or when there is none).
pub(crate) fn unseal<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a [u8], StoreError> {
    let Some(body_len) = bytes.len().checked_sub(TRAILER_LEN) else {
        return Err(StoreError::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            reason: "shorter than its checksum".into(),
        });
    };
    let (body, tail) = bytes.split_at(body_len);
    if crc32c::crc32c(body) != u32_at(tail, 0) {
        return Err(StoreError::Corrupt {
            file: path.to_path_buf(),
            offset: body_len as u64,
            reason: "checksum mismatch".into(),
        });
    }
    Ok(body)
}

/// The little-endian u32 at byte `at` of `b` (which must hold it).
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_magics() {
        let kinds = [&SEGMENT, &WAL, &BLOOM, &TOMBSTONES];
        for (i, a) in kinds.iter().enumerate() {
            for b in &kinds[i + 1..] {
                assert_ne!(a.magic, b.magic);
            }
            assert!(a.oldest >= 1 && a.oldest <= a.newest);
        }
    }

    #[test]
    fn version_refuses_other_kinds_short_files_and_unknown_versions() {
        let p = Path::new("f");
        let mut b = Vec::new();
        TOMBSTONES.begin(&mut b);
        assert_eq!(b.len(), PREFIX_LEN);
        assert_eq!(TOMBSTONES.version(p, &b).unwrap(), TOMBSTONES.newest);
        assert!(matches!(
            BLOOM.version(p, &b),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(matches!(
            TOMBSTONES.version(p, &b[..PREFIX_LEN - 1]),
            Err(StoreError::Corrupt { .. })
        ));
        for v in [0, TOMBSTONES.newest + 1, u32::MAX] {
            b[8..12].copy_from_slice(&v.to_le_bytes());
            assert!(matches!(
                TOMBSTONES.version(p, &b),
                Err(StoreError::UnsupportedVersion { found, .. }) if found == v
            ));
        }
    }

    #[test]
    fn unseal_checks_the_trailer() {
        let p = Path::new("f");
        let mut b = b"some bytes".to_vec();
        seal(&mut b);
        assert_eq!(unseal(p, &b).unwrap(), b"some bytes");
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x40;
            assert!(unseal(p, &bad).is_err(), "flip at {i}");
        }
        assert!(unseal(p, &b[..3]).is_err());
    }
}
