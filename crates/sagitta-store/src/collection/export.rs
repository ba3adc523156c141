//! A consistent copy-out of a collection's last commit (the MANIFEST bytes
//! and open handles to every file it names), and the reverse: installing
//! a manifest into a directory whose files were copied in. Object storage
//! (`sagitta-remote`) is built on these two.

use super::files::{Manifest, MANIFEST};
use super::{Collection, OpenMode};
use crate::error::{io, Result, StoreError};
use std::fs::File;
use std::path::Path;

/// What a file named by a manifest holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    /// A sealed segment (immutable once written; its name is never reused
    /// by the collection that wrote it).
    Segment,
    /// The tombstone file of one generation.
    Tombstones,
    /// The bloom filter of one generation.
    Bloom,
}

/// One file of an [`Export`]: open, so it stays readable after the
/// collection replaces and removes it.
#[derive(Debug)]
pub struct ExportFile {
    /// Its name in the collection directory.
    pub name: String,
    pub kind: ExportKind,
    /// Its length when opened (the files a manifest names never change).
    pub len: u64,
    pub file: File,
}

/// The files behind one commit of a collection: together they open as the
/// collection as of that commit (every WAL record up to `wal_seq`).
#[derive(Debug)]
pub struct Export {
    pub generation: u64,
    pub wal_seq: u64,
    /// The MANIFEST file, byte for byte (its checksum line included).
    pub manifest: Vec<u8>,
    pub files: Vec<ExportFile>,
}

impl Collection {
    /// The files of the last commit, opened under the commit lock so no
    /// commit can replace them in between. Rows still in the mutable part
    /// are not in it: call [`Collection::seal`] first to include them.
    pub fn export(&self) -> Result<Export> {
        let dir = self.dir().to_path_buf();
        if self.mode() == OpenMode::ReadWrite {
            let _m = self.inner.manifest.lock();
            return export_dir(&dir);
        }
        // A reader races the writer's commits: read again when a named
        // file is already gone.
        let mut attempt = 0;
        loop {
            match export_dir(&dir) {
                Err(StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && attempt < 5 =>
                {
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    /// Makes `dir` (holding the files `manifest` names, copied in and
    /// checked by the caller) a collection: checks the manifest bytes and
    /// that every file it names is present, then writes them as its
    /// MANIFEST durably. `dir` must not hold a collection yet.
    pub fn install(dir: &Path, manifest: &[u8]) -> Result<()> {
        if dir.join(MANIFEST).exists() {
            return Err(StoreError::AlreadyExists {
                dir: dir.to_path_buf(),
            });
        }
        let m = Manifest::parse(&dir.join(MANIFEST), manifest)?;
        for name in named(&m) {
            let p = dir.join(name);
            std::fs::metadata(&p).map_err(io("stat", &p))?;
        }
        crate::durable::write_durably(&dir.join(MANIFEST), manifest)
    }
}

/// Every file `m` names.
fn named(m: &Manifest) -> impl Iterator<Item = &str> {
    m.segments
        .iter()
        .map(|s| s.file.as_str())
        .chain(m.tombstones.as_deref())
        .chain(m.bloom_file())
}

fn export_dir(dir: &Path) -> Result<Export> {
    let path = dir.join(MANIFEST);
    let bytes = std::fs::read(&path).map_err(io("read", &path))?;
    let m = Manifest::parse(&path, &bytes)?;
    let mut files = Vec::new();
    let kinds = m
        .segments
        .iter()
        .map(|s| (s.file.as_str(), ExportKind::Segment))
        .chain(m.tombstones.as_deref().map(|t| (t, ExportKind::Tombstones)))
        .chain(m.bloom_file().map(|b| (b, ExportKind::Bloom)));
    for (name, kind) in kinds {
        let p = dir.join(name);
        let file = File::open(&p).map_err(io("open", &p))?;
        let len = file.metadata().map_err(io("stat", &p))?.len();
        files.push(ExportFile {
            name: name.to_string(),
            kind,
            len,
            file,
        });
    }
    Ok(Export {
        generation: m.generation,
        wal_seq: m.wal_seq,
        manifest: bytes,
        files,
    })
}
