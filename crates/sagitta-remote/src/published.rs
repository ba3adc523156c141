//! The version file: what one publish put in the object store, and the
//! commit point of that publish (see docs/FORMAT.md, "Object storage").

use crate::error::{RemoteError, Result};
use serde::{Deserialize, Serialize};

/// Format of version files written by this build: 2 adds each file's
/// SHA-256 and names data objects by it.
pub const VERSION_FORMAT: u32 = 2;
/// The oldest format this build reads (1: data objects named by CRC32C).
pub const OLDEST_VERSION_FORMAT: u32 = 1;

/// One file of a published collection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PublishedFile {
    /// Name in the collection directory (`seg-000001.sgt`, `MANIFEST`, ...).
    pub name: String,
    /// Object name, relative to the location (`data/...`).
    pub object: String,
    pub len: u64,
    /// CRC32C of the whole file, 8 hex digits.
    pub crc32c: String,
    /// SHA-256 of the whole file, 64 hex digits (format 2 on). The CRC
    /// alone does not identify a file: every file that ends with a CRC32C
    /// of the bytes before it has the same whole-file CRC32C (the CRC's
    /// residue), so two bloom filters of one size would share it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A published version of a collection.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Published {
    pub format: u32,
    /// 1, 2, ...: one more than the version it replaced.
    pub version: u64,
    /// Milliseconds since the Unix epoch when it was published.
    pub created_ms: u64,
    /// The collection's manifest generation and WAL sequence it holds.
    pub generation: u64,
    pub wal_seq: u64,
    /// The MANIFEST (listed apart: it is written last when installed).
    pub manifest: PublishedFile,
    /// Segments, tombstones and bloom filter the manifest names.
    pub files: Vec<PublishedFile>,
    /// The publisher's own data (a cluster records the write-log position
    /// the version holds); `null` when none.
    #[serde(default)]
    pub meta: serde_json::Value,
}

impl Published {
    /// The first listed file whose name starts with `prefix`.
    pub fn published_file(&self, prefix: &str) -> Option<&PublishedFile> {
        self.files.iter().find(|f| f.name.starts_with(prefix))
    }

    /// Bytes of every file, the manifest included.
    pub fn bytes(&self) -> u64 {
        self.manifest.len + self.files.iter().map(|f| f.len).sum::<u64>()
    }

    /// The version file: JSON, then a line `crc32c:XXXXXXXX` over every
    /// byte before it (as the MANIFEST).
    pub fn encode(&self) -> Vec<u8> {
        let mut body = serde_json::to_vec_pretty(self).unwrap_or_default();
        body.push(b'\n');
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(format!("crc32c:{crc:08x}\n").as_bytes());
        body
    }

    /// Parses and checks a version file (`object` names it in errors).
    pub fn decode(object: &str, bytes: &[u8]) -> Result<Published> {
        let bad = |reason: String| RemoteError::Corrupt {
            object: object.to_string(),
            reason,
        };
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
        let at = text
            .rfind("crc32c:")
            .ok_or_else(|| bad("no checksum line".into()))?;
        let want = u32::from_str_radix(text[at + 7..].trim(), 16)
            .map_err(|_| bad("bad checksum line".into()))?;
        if crc32c::crc32c(&bytes[..at]) != want {
            return Err(bad("checksum mismatch".into()));
        }
        let p: Published = serde_json::from_slice(&bytes[..at])
            .map_err(|e| bad(format!("bad version file: {e}")))?;
        if !(OLDEST_VERSION_FORMAT..=VERSION_FORMAT).contains(&p.format) {
            return Err(bad(format!(
                "version file format {} (this build reads {OLDEST_VERSION_FORMAT} to {VERSION_FORMAT})",
                p.format
            )));
        }
        let names = std::iter::once(&p.manifest).chain(&p.files);
        for f in names {
            let plain = |s: &str| {
                !s.is_empty()
                    && !s.contains("..")
                    && !s.starts_with('/')
                    && s.bytes().all(|b| b.is_ascii_graphic())
            };
            if !plain(&f.name) || f.name.contains('/') || !plain(&f.object) {
                return Err(bad(format!("bad file name {:?} / {:?}", f.name, f.object)));
            }
            if f.crc32c.len() != 8 || u32::from_str_radix(&f.crc32c, 16).is_err() {
                return Err(bad(format!("bad checksum {:?} for {}", f.crc32c, f.name)));
            }
            match &f.sha256 {
                Some(h) if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    return Err(bad(format!("bad SHA-256 {h:?} for {}", f.name)));
                }
                None if p.format >= 2 => {
                    return Err(bad(format!("no SHA-256 for {}", f.name)));
                }
                _ => {}
            }
        }
        Ok(p)
    }
}

/// Object name of a data file: content-addressed by SHA-256 and length,
/// so two writers (a replica promoted after a failover) never overwrite
/// each other's `seg-000001.sgt`, and an object already stored under the
/// name holds the same bytes.
pub(crate) fn data_object(name: &str, len: u64, sha256: &str) -> String {
    format!("data/{sha256}-{len:x}-{name}")
}

/// The checksums a file is listed with: CRC32C and SHA-256 (hex), fed
/// piece by piece.
#[derive(Default)]
pub(crate) struct Digest {
    crc: u32,
    sha: sha2::Sha256,
    pub(crate) len: u64,
}

impl Digest {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        use sha2::Digest as _;
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.sha.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// `(crc32c, sha256)` as listed in version files.
    pub(crate) fn finish(self) -> (String, String) {
        use sha2::Digest as _;
        let sha = self.sha.finalize();
        let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
        (format!("{:08x}", self.crc), hex)
    }
}

/// Whether `got` (`(crc32c, sha256)` of `len` bytes) is what `f` lists.
pub(crate) fn matches(f: &PublishedFile, len: u64, got: &(String, String)) -> bool {
    len == f.len && got.0 == f.crc32c && f.sha256.as_ref().is_none_or(|h| *h == got.1)
}

/// Object name of version `v` (20 digits, so names sort as numbers).
pub(crate) fn version_object(v: u64) -> String {
    format!("versions/{v:020}.json")
}

/// The object naming the newest version (a copy of its version file).
pub(crate) const LATEST: &str = "LATEST";
