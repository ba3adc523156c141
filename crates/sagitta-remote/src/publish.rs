//! Publishing a collection's last commit to its location.

use crate::error::{io, RemoteError, Result};
use crate::published::{self, Published, PublishedFile, VERSION_FORMAT};
use crate::Remote;
use object_store::buffered::BufWriter;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use sagitta_store::{Collection, ExportFile};
use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom};
use tokio::io::AsyncWriteExt;

/// Read and upload in pieces of this size.
const CHUNK: usize = 8 << 20;

/// What a publish did.
#[derive(Debug, Clone)]
pub struct PublishReport {
    /// The version now at `LATEST`.
    pub published: Published,
    /// Files uploaded (new since the last publish) and their bytes.
    pub uploaded_files: usize,
    pub uploaded_bytes: u64,
    /// Files already in the store (same checksum and length).
    pub reused_files: usize,
    /// Objects of versions older than the kept ones, removed.
    pub removed_objects: usize,
}

impl Remote {
    /// Publishes the collection's last commit (seal it first to include
    /// the rows still in its mutable part) as the next version, with
    /// `meta` stored in the version file; keeps the newest `keep` versions
    /// (at least 1) and removes objects only older ones name.
    pub fn publish(
        &self,
        c: &Collection,
        meta: serde_json::Value,
        keep: usize,
    ) -> Result<PublishReport> {
        self.rt.block_on(self.publish_async(c, meta, keep.max(1)))
    }

    async fn publish_async(
        &self,
        c: &Collection,
        meta: serde_json::Value,
        keep: usize,
    ) -> Result<PublishReport> {
        let export = c.export()?;
        let dir = c.dir().to_path_buf();
        let mut report = PublishReport {
            published: Published {
                format: VERSION_FORMAT,
                version: 0,
                created_ms: now_ms(),
                generation: export.generation,
                wal_seq: export.wal_seq,
                manifest: PublishedFile {
                    name: "MANIFEST".into(),
                    object: String::new(),
                    len: export.manifest.len() as u64,
                    crc32c: String::new(),
                    sha256: None,
                },
                files: Vec::new(),
                meta,
            },
            uploaded_files: 0,
            uploaded_bytes: 0,
            reused_files: 0,
            removed_objects: 0,
        };
        for f in &export.files {
            let (crc, sha) = self.file_digest(&dir, f)?;
            let object = published::data_object(&f.name, f.len, &sha);
            if self.has(&object, f.len).await? {
                report.reused_files += 1;
            } else {
                self.upload_file(&dir, f, &object).await?;
                report.uploaded_files += 1;
                report.uploaded_bytes += f.len;
            }
            report.published.files.push(PublishedFile {
                name: f.name.clone(),
                object,
                len: f.len,
                crc32c: crc,
                sha256: Some(sha),
            });
        }
        let mut d = published::Digest::default();
        d.update(&export.manifest);
        let (crc, sha) = d.finish();
        let object = published::data_object("MANIFEST", export.manifest.len() as u64, &sha);
        if !self.has(&object, export.manifest.len() as u64).await? {
            self.store
                .put(
                    &self.path(&object),
                    PutPayload::from(export.manifest.clone()),
                )
                .await?;
            report.uploaded_files += 1;
            report.uploaded_bytes += export.manifest.len() as u64;
        }
        report.published.manifest.object = object;
        report.published.manifest.crc32c = crc;
        report.published.manifest.sha256 = Some(sha);

        // The version number: past every version file (one written by a
        // publish that died before LATEST included) and past LATEST.
        let listed = self.list_versions().await?;
        let latest = self.read_latest().await?.map(|p| p.version).unwrap_or(0);
        let version = listed.last().copied().unwrap_or(0).max(latest) + 1;
        report.published.version = version;
        let bytes = report.published.encode();
        let name = published::version_object(version);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&self.path(&name), PutPayload::from(bytes.clone()), opts)
            .await
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(RemoteError::Conflict {
                    location: self.location.clone(),
                    version,
                })
            }
            Err(e) => return Err(e.into()),
        }
        // The commit point.
        self.store
            .put(&self.path(published::LATEST), PutPayload::from(bytes))
            .await?;
        report.removed_objects = self.collect(version, keep).await?;
        Ok(report)
    }

    /// CRC32C and SHA-256 of an exported file (read once per file and
    /// length: the files a manifest names never change).
    fn file_digest(&self, dir: &std::path::Path, f: &ExportFile) -> Result<(String, String)> {
        let key = (dir.to_path_buf(), f.name.clone(), f.len);
        if let Some(c) = self.digests.lock().get(&key) {
            return Ok(c.clone());
        }
        let path = dir.join(&f.name);
        let mut file = &f.file;
        file.seek(SeekFrom::Start(0)).map_err(io("seek", &path))?;
        let mut buf = vec![0u8; CHUNK];
        let mut d = published::Digest::default();
        let mut left = f.len;
        while left > 0 {
            let want = (left as usize).min(CHUNK);
            file.read_exact(&mut buf[..want])
                .map_err(io("read", &path))?;
            d.update(&buf[..want]);
            left -= want as u64;
        }
        let got = d.finish();
        self.digests.lock().insert(key, got.clone());
        Ok(got)
    }

    /// Whether `object` is stored with length `len` (its name carries the
    /// SHA-256, so the bytes are the same).
    async fn has(&self, object: &str, len: u64) -> Result<bool> {
        match self.store.head(&self.path(object)).await {
            Ok(m) => Ok(m.size == len),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Streams an exported file to `object` (a multipart upload past one
    /// chunk; the object appears whole or not at all).
    async fn upload_file(&self, dir: &std::path::Path, f: &ExportFile, object: &str) -> Result<()> {
        let path = dir.join(&f.name);
        let mut file = &f.file;
        file.seek(SeekFrom::Start(0)).map_err(io("seek", &path))?;
        let mut w = BufWriter::with_capacity(self.store.clone(), self.path(object), CHUNK);
        let mut buf = vec![0u8; CHUNK];
        let mut left = f.len;
        let r: Result<()> = async {
            while left > 0 {
                let want = (left as usize).min(CHUNK);
                file.read_exact(&mut buf[..want])
                    .map_err(io("read", &path))?;
                w.write_all(&buf[..want])
                    .await
                    .map_err(io("upload", &path))?;
                left -= want as u64;
            }
            w.shutdown().await.map_err(io("upload", &path))
        }
        .await;
        if r.is_err() {
            let _ = w.abort().await;
        }
        r
    }

    /// Removes version files older than the newest `keep`, and data
    /// objects no kept version names (including uploads of a publish that
    /// died before its version file). Returns how many it removed.
    async fn collect(&self, newest: u64, keep: usize) -> Result<usize> {
        use futures::TryStreamExt;
        let versions = self.list_versions().await?;
        let floor = newest.saturating_sub(keep as u64 - 1);
        let mut live: HashSet<String> = HashSet::new();
        let mut removed = 0;
        for &v in &versions {
            if v >= floor {
                let p = self.read_version(v).await?;
                live.insert(p.manifest.object.clone());
                live.extend(p.files.iter().map(|f| f.object.clone()));
            }
        }
        for &v in versions.iter().filter(|&&v| v < floor) {
            self.store
                .delete(&self.path(&published::version_object(v)))
                .await?;
            removed += 1;
        }
        let data = self.path("data");
        let metas: Vec<_> = self.store.list(Some(&data)).try_collect().await?;
        for m in metas {
            let Some(name) = m.location.filename() else {
                continue;
            };
            if !live.contains(&format!("data/{name}")) {
                match self.store.delete(&m.location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => removed += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(removed)
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
