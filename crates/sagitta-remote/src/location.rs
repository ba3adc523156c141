//! Turning a location string into an object store and a prefix in it.

use crate::error::{RemoteError, Result};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use std::sync::Arc;

/// `file:///abs/dir`, a plain path, or (feature `s3`) `s3://bucket/prefix`.
pub(crate) fn parse(location: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let bad = |why: &str| RemoteError::Location(location.to_string(), why.to_string());
    if let Some(rest) = location.strip_prefix("s3://") {
        return s3(location, rest);
    }
    let dir = match location.strip_prefix("file://") {
        Some(p) if p.starts_with('/') => p,
        Some(_) => return Err(bad("a file:// location needs an absolute path")),
        None if location.contains("://") => {
            return Err(bad("unknown scheme (file:// or s3:// or a plain path)"))
        }
        None => location,
    };
    if dir.is_empty() {
        return Err(bad("empty path"));
    }
    std::fs::create_dir_all(dir).map_err(crate::error::io("create", std::path::Path::new(dir)))?;
    let fs = LocalFileSystem::new_with_prefix(dir)?;
    Ok((Arc::new(fs), ObjectPath::default()))
}

#[cfg(feature = "s3")]
fn s3(location: &str, rest: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(RemoteError::Location(location.into(), "no bucket".into()));
    }
    let store = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()?;
    let prefix = ObjectPath::parse(prefix.trim_end_matches('/'))
        .map_err(|e| RemoteError::Location(location.into(), e.to_string()))?;
    Ok((Arc::new(store), prefix))
}

#[cfg(not(feature = "s3"))]
fn s3(location: &str, _rest: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    Err(RemoteError::Location(
        location.into(),
        "this build has no S3 support (cargo feature `s3` of sagitta-remote)".into(),
    ))
}
