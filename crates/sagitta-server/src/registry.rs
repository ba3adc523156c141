//! The collections a server serves: one directory each under the data
//! directory, opened at start, created and dropped by requests.

use crate::error::{ApiError, ApiResult};
use crate::opener::Opener;
use parking_lot::{Mutex, RwLock};
use sagitta_store::dirs::{self, Removed};
use sagitta_store::{Collection, CollectionConfig, OpenMode, StoreError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Longest collection name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// Checks a collection name: 1..=64 of `[A-Za-z0-9_.-]`, starting with a
/// letter, digit or `_` (so never `.`, `..`, a hidden or a path name).
pub fn validate_name(name: &str) -> ApiResult<()> {
    let ok_first = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    let ok_rest = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if name.is_empty() || name.len() > MAX_NAME_LEN || !ok_first || !ok_rest {
        let shown: String = name.chars().take(80).collect();
        return Err(ApiError::BadRequest(format!(
            "invalid collection name {shown:?}: use 1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 _ - ., starting with a letter, digit or _"
        )));
    }
    Ok(())
}

/// A served collection and the server's bookkeeping about it.
#[derive(Debug)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// The collection (open for writing).
    pub coll: Arc<Collection>,
    /// Rows received by ingest requests still being written.
    pub pending_rows: AtomicU64,
    /// Rows written by ingest requests since the server started.
    pub ingested_rows: AtomicU64,
}

/// Name → collection.
#[derive(Debug)]
pub struct Registry {
    root: PathBuf,
    cols: RwLock<BTreeMap<String, Arc<Entry>>>,
    // Serialises create and drop (directory operations).
    ddl: Mutex<()>,
    /// Every collection is opened or created on this thread (the
    /// priority its background work runs at; see `opener`).
    opener: Opener,
}

impl Registry {
    /// Opens every collection under `root` (creating `root` if missing).
    /// A directory that fails to open is logged and skipped.
    pub fn open(root: &Path) -> std::io::Result<Registry> {
        let mut cols = BTreeMap::new();
        let mut names = dirs::collections_in(root)?;
        names.retain(|n| validate_name(n).is_ok());
        match dirs::clean_tombstones(root) {
            Ok(left) => {
                for (path, err) in left {
                    tracing::warn!(path = %path.display(), error = %err, "could not delete a dropped collection's files");
                }
            }
            Err(err) => tracing::warn!(error = %err, "could not clean dropped collections"),
        }
        let opener = Opener::start();
        for name in names {
            let dir = root.join(&name);
            match opener.run(move || Collection::open(&dir, OpenMode::ReadWrite)) {
                Ok(c) => {
                    tracing::info!(collection = %name, vectors = c.len(), "opened collection");
                    cols.insert(name.clone(), Arc::new(Entry::new(name, c)));
                }
                Err(e) => {
                    tracing::error!(collection = %name, error = %e, "cannot open collection; not served")
                }
            }
        }
        Ok(Registry {
            root: root.to_path_buf(),
            cols: RwLock::new(cols),
            ddl: Mutex::new(()),
            opener,
        })
    }

    /// The collection `name`.
    pub fn get(&self, name: &str) -> ApiResult<Arc<Entry>> {
        validate_name(name)?;
        self.cols
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(name.chars().take(80).collect()))
    }

    /// Whether `name` is served (for metric labels: unknown names are not
    /// used as label values).
    pub fn contains(&self, name: &str) -> bool {
        self.cols.read().contains_key(name)
    }

    /// Every served collection, by name.
    pub fn all(&self) -> Vec<Arc<Entry>> {
        self.cols.read().values().cloned().collect()
    }

    /// Creates a collection; `Conflict` if the name is taken.
    pub fn create(&self, name: &str, config: CollectionConfig) -> ApiResult<Arc<Entry>> {
        validate_name(name)?;
        let _g = self.ddl.lock();
        if self.cols.read().contains_key(name) {
            return Err(ApiError::Conflict(name.into()));
        }
        let dir = self.root.join(name);
        let c = match self.opener.run(move || Collection::create(&dir, config)) {
            Ok(c) => c,
            Err(StoreError::AlreadyExists { .. }) => return Err(ApiError::Conflict(name.into())),
            Err(e) => return Err(e.into()),
        };
        let e = Arc::new(Entry::new(name.into(), c));
        self.cols.write().insert(name.into(), e.clone());
        tracing::info!(collection = %name, "created collection");
        Ok(e)
    }

    /// The collection `name`, created with `config()` if missing.
    pub fn get_or_create(
        &self,
        name: &str,
        config: impl FnOnce() -> ApiResult<CollectionConfig>,
    ) -> ApiResult<(Arc<Entry>, bool)> {
        if let Ok(e) = self.get(name) {
            return Ok((e, false));
        }
        match self.create(name, config()?) {
            Ok(e) => Ok((e, true)),
            Err(ApiError::Conflict(_)) => Ok((self.get(name)?, false)),
            Err(e) => Err(e),
        }
    }

    /// Drops a collection: it stops being served at once, and its
    /// directory is removed through the store ([`dirs::remove_dir`]:
    /// renamed aside durably, then deleted; what a crash leaves is
    /// deleted at the next open).
    pub fn drop_collection(&self, name: &str) -> ApiResult<()> {
        validate_name(name)?;
        let _g = self.ddl.lock();
        let e = self
            .cols
            .write()
            .remove(name)
            .ok_or_else(|| ApiError::NotFound(name.into()))?;
        let dir = e.coll.dir().to_path_buf();
        drop(e);
        // The store renames it to a hidden name (never a collection's, so
        // a collection created right after cannot clash), fsyncs, deletes.
        if let Removed::Left { path, error } = dirs::remove_dir(&dir)? {
            tracing::warn!(path = %path.display(), error = %error, "could not delete a dropped collection's files");
        }
        tracing::info!(collection = %name, "dropped collection");
        Ok(())
    }

    /// Flushes every collection's WAL (at shutdown).
    pub fn flush_all(&self) {
        for e in self.all() {
            if let Err(err) = e.coll.flush() {
                tracing::error!(collection = %e.name, error = %err, "flush failed");
            }
        }
    }
}

impl Entry {
    fn new(name: String, coll: Collection) -> Entry {
        Entry {
            name,
            coll: Arc::new(coll),
            pending_rows: AtomicU64::new(0),
            ingested_rows: AtomicU64::new(0),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors
    use super::*;

    #[test]
    fn names_are_validated() {
        for ok in ["a", "docs", "Docs_2024", "_x", "a.b-c", &"x".repeat(64)] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "-x",
            "a/b",
            "../etc",
            "a\\b",
            "a b",
            "naïve",
            "a\0b",
            &"x".repeat(65),
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn create_get_drop_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let space =
            sagitta_index::Space::new(4, sagitta_index::Metric::L2, sagitta_index::DType::F32)
                .unwrap();
        let r = Registry::open(dir.path()).unwrap();
        r.create("one", CollectionConfig::new(space)).unwrap();
        assert!(matches!(
            r.create("one", CollectionConfig::new(space)),
            Err(ApiError::Conflict(_))
        ));
        r.create("two", CollectionConfig::new(space)).unwrap();
        drop(r);
        let r = Registry::open(dir.path()).unwrap();
        assert_eq!(r.all().len(), 2);
        r.drop_collection("one").unwrap();
        assert!(matches!(r.get("one"), Err(ApiError::NotFound(_))));
        assert!(!dir.path().join("one").exists());
        drop(r);
        let r = Registry::open(dir.path()).unwrap();
        let names: Vec<String> = r.all().iter().map(|e| e.name.clone()).collect();
        assert_eq!(names, ["two"]);
    }
}
