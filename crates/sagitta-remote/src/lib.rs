//! Sagitta collections in object storage.
//!
//! A writer *publishes* the last commit of a collection: every segment,
//! tombstone and bloom file its manifest names is uploaded under
//! `data/` (content-addressed: checksum, length, name), then a version
//! file listing them (with each file's CRC32C) under `versions/`, then
//! `LATEST`, a copy of that version file: the commit point, so a reader
//! never sees a partial upload. A node *fetches* the latest version into
//! a local directory (downloads checked against the listed checksums, a
//! file already there with the right checksum kept), installs the
//! manifest last, and opens it as an ordinary collection, memory-mapped.
//!
//! Locations: a local directory (`file:///abs/dir`, or a plain path) with
//! the default build; `s3://bucket/prefix` (AWS_* environment variables:
//! credentials, `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`) with the `s3` feature.
//! One writer per location: a second one is caught when both publish the
//! same version number (conditional put), not prevented.

mod error;
mod fetch;
mod location;
mod publish;
mod published;

pub use error::{RemoteError, Result};
pub use fetch::FetchReport;
pub use publish::PublishReport;
pub use published::{Published, PublishedFile, VERSION_FORMAT};

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// A file of a collection directory: (directory, name, length).
type FileId = (PathBuf, String, u64);
/// `(crc32c, sha256)` of a file, as version files list them.
type Checksums = (String, String);

/// A location in an object store where one collection is published.
pub struct Remote {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    location: String,
    rt: tokio::runtime::Runtime,
    /// CRC32C and SHA-256 of files already read, by (directory, name, length):
    /// files a manifest names never change, so a publish reads only the
    /// new ones.
    digests: Mutex<HashMap<FileId, Checksums>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// Opens a location (see the crate docs for the forms).
    pub fn open(location: &str) -> Result<Remote> {
        let (store, prefix) = location::parse(location)?;
        Remote::with_store(store, prefix, location)
    }

    /// A location in a store the caller built (`prefix` inside it).
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: ObjectPath,
        label: &str,
    ) -> Result<Remote> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(error::io("start runtime for", std::path::Path::new(label)))?;
        Ok(Remote {
            store,
            prefix,
            location: label.to_string(),
            rt,
            digests: Mutex::default(),
        })
    }

    /// The location as given.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The newest published version, `None` before the first publish.
    pub fn latest(&self) -> Result<Option<Published>> {
        self.rt.block_on(self.read_latest())
    }

    /// Published version numbers still stored, oldest first.
    pub fn versions(&self) -> Result<Vec<u64>> {
        self.rt.block_on(self.list_versions())
    }

    fn path(&self, object: &str) -> ObjectPath {
        let mut p = self.prefix.clone();
        for part in object.split('/') {
            p = p.join(part);
        }
        p
    }

    async fn read_latest(&self) -> Result<Option<Published>> {
        match self.store.get(&self.path(published::LATEST)).await {
            Ok(r) => {
                let bytes = r.bytes().await?;
                Published::decode(published::LATEST, &bytes).map(Some)
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn read_version(&self, v: u64) -> Result<Published> {
        let name = published::version_object(v);
        let bytes = self.store.get(&self.path(&name)).await?.bytes().await?;
        Published::decode(&name, &bytes)
    }

    async fn list_versions(&self) -> Result<Vec<u64>> {
        use futures::TryStreamExt;
        let dir = self.path("versions");
        let metas: Vec<_> = self.store.list(Some(&dir)).try_collect().await?;
        let mut out: Vec<u64> = metas
            .iter()
            .filter_map(|m| m.location.filename())
            .filter_map(|n| n.strip_suffix(".json"))
            .filter_map(|n| n.parse().ok())
            .collect();
        out.sort_unstable();
        Ok(out)
    }
}
