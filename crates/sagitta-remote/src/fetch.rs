//! Fetching the latest published version into a local directory.

use crate::error::{io, RemoteError, Result};
use crate::published::{matches, Digest, Published, PublishedFile};
use crate::Remote;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use sagitta_store::Collection;
use std::io::{Read, Write};
use std::path::Path;

/// Downloads run this many at a time.
const PARALLEL: usize = 4;
/// A version removed by the writer while it is read (it keeps only the
/// newest few) is retried with the new latest this many times.
const ATTEMPTS: usize = 3;

/// What a fetch did.
#[derive(Debug, Clone)]
pub struct FetchReport {
    /// The version installed.
    pub published: Published,
    /// Files downloaded, and their bytes.
    pub downloaded_files: usize,
    pub downloaded_bytes: u64,
    /// Files already in the directory with the listed checksum.
    pub reused_files: usize,
}

impl Remote {
    /// Fetches the latest version into `dir` (created if missing; it must
    /// not hold a collection): every file is checked against the version
    /// file's length and CRC32C (a file already there that matches is
    /// kept), the manifest is written last. Then `Collection::open(dir)`
    /// opens it. Errors with [`RemoteError::NothingPublished`] when the
    /// location is empty.
    pub fn fetch(&self, dir: &Path) -> Result<FetchReport> {
        self.rt.block_on(async {
            let mut attempt = 0;
            loop {
                let Some(p) = self.read_latest().await? else {
                    return Err(RemoteError::NothingPublished(self.location.clone()));
                };
                match self.fetch_version(p, dir).await {
                    Err(RemoteError::ObjectStore(object_store::Error::NotFound { .. }))
                        if attempt + 1 < ATTEMPTS =>
                    {
                        attempt += 1;
                    }
                    r => return r,
                }
            }
        })
    }

    async fn fetch_version(&self, p: Published, dir: &Path) -> Result<FetchReport> {
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        if Collection::exists(dir) {
            return Err(sagitta_store::StoreError::AlreadyExists {
                dir: dir.to_path_buf(),
            }
            .into());
        }
        let results: Vec<Option<u64>> = futures::stream::iter(p.files.iter())
            .map(|f| self.fetch_file(f, dir))
            .buffer_unordered(PARALLEL)
            .try_collect()
            .await?;
        let manifest = self
            .store
            .get(&self.path(&p.manifest.object))
            .await?
            .bytes()
            .await?;
        let mut d = Digest::default();
        d.update(&manifest);
        check(&p.manifest, manifest.len() as u64, d.finish())?;
        Collection::install(dir, &manifest)?;
        let downloaded: Vec<u64> = results.iter().flatten().copied().collect();
        Ok(FetchReport {
            downloaded_files: downloaded.len(),
            downloaded_bytes: downloaded.iter().sum(),
            reused_files: results.len() - downloaded.len(),
            published: p,
        })
    }

    /// Downloads one file unless `dir` already has it with the listed
    /// checksum; `Some(bytes)` when it downloaded.
    async fn fetch_file(&self, f: &PublishedFile, dir: &Path) -> Result<Option<u64>> {
        let path = dir.join(&f.name);
        if local_matches(&path, f) {
            return Ok(None);
        }
        let tmp = dir.join(format!("{}.tmp", f.name));
        let r: Result<()> = async {
            let mut out = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
            let mut stream = self.store.get(&self.path(&f.object)).await?.into_stream();
            let mut d = Digest::default();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                d.update(&chunk);
                out.write_all(&chunk).map_err(io("write", &tmp))?;
            }
            let len = d.len;
            check(f, len, d.finish())?;
            out.sync_all().map_err(io("fsync", &tmp))?;
            std::fs::rename(&tmp, &path).map_err(io("rename", &tmp))
        }
        .await;
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r.map(|()| Some(f.len))
    }
}

/// Whether the bytes match what the version file lists.
fn check(f: &PublishedFile, len: u64, got: (String, String)) -> Result<()> {
    if !matches(f, len, &got) {
        return Err(RemoteError::Corrupt {
            object: f.object.clone(),
            reason: format!(
                "{len} bytes with CRC32C {} and SHA-256 {}, the version lists {} bytes with {} and {}",
                got.0,
                got.1,
                f.len,
                f.crc32c,
                f.sha256.as_deref().unwrap_or("-")
            ),
        });
    }
    Ok(())
}

/// Whether `path` exists with the listed length and checksums.
fn local_matches(path: &Path, f: &PublishedFile) -> bool {
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    if file.metadata().map(|m| m.len()).ok() != Some(f.len) {
        return false;
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut d = Digest::default();
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => d.update(&buf[..n]),
            Err(_) => return false,
        }
    }
    let len = d.len;
    matches(f, len, &d.finish())
}
