//! Object storage from Python: publish a collection, fetch the latest
//! published version into a directory (`sagitta_remote`). The `sagitta`
//! package wraps these as `sagitta.publish`, `sagitta.fetch`,
//! `sagitta.published`.

use crate::collection::PyCollection;
use crate::errors::{store_err, CorruptFileError};
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sagitta_remote::{Published, Remote, RemoteError};
use std::path::PathBuf;

pyo3::create_exception!(
    sagitta,
    RemoteStoreError,
    PyOSError,
    "The object store refused an operation (unreachable, permissions, a full volume), or another writer published to the same location."
);

fn remote_err(e: RemoteError) -> PyErr {
    match e {
        RemoteError::Store(e) => store_err(e),
        e @ RemoteError::Corrupt { .. } => CorruptFileError::new_err(e.to_string()),
        e @ RemoteError::NothingPublished(_) => PyFileNotFoundError::new_err(e.to_string()),
        e @ RemoteError::Location(..) => PyValueError::new_err(format!("location: {e}")),
        e => RemoteStoreError::new_err(e.to_string()),
    }
}

fn published_dict<'py>(py: Python<'py>, p: &Published) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", p.version)?;
    d.set_item("created_ms", p.created_ms)?;
    d.set_item("generation", p.generation)?;
    d.set_item("wal_seq", p.wal_seq)?;
    d.set_item("files", p.files.len() + 1)?;
    d.set_item("bytes", p.bytes())?;
    d.set_item("meta", serde_json::to_string(&p.meta).unwrap_or_default())?;
    Ok(d)
}

/// Publishes the collection's last commit to ``location`` (sealing it
/// first unless ``seal=False``); ``meta`` is a JSON text stored with the
/// version. Returns the version's description plus ``uploaded_files``,
/// ``uploaded_bytes``, ``reused_files``, ``removed_objects``.
#[pyfunction]
#[pyo3(signature = (collection, location, meta = None, seal = true, keep = 2))]
pub fn publish<'py>(
    py: Python<'py>,
    collection: &PyCollection,
    location: &str,
    meta: Option<&str>,
    seal: bool,
    keep: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let c = collection.coll()?;
    let meta: serde_json::Value = match meta {
        Some(m) => {
            serde_json::from_str(m).map_err(|e| PyValueError::new_err(format!("meta: {e}")))?
        }
        None => serde_json::Value::Null,
    };
    let r = py
        .detach(|| {
            if seal && c.mode() == sagitta_store::OpenMode::ReadWrite {
                c.seal()?;
            }
            Remote::open(location)?.publish(&c, meta, keep)
        })
        .map_err(remote_err)?;
    let d = published_dict(py, &r.published)?;
    d.set_item("uploaded_files", r.uploaded_files)?;
    d.set_item("uploaded_bytes", r.uploaded_bytes)?;
    d.set_item("reused_files", r.reused_files)?;
    d.set_item("removed_objects", r.removed_objects)?;
    Ok(d)
}

/// Fetches the latest version at ``location`` into ``path`` (which must
/// not hold a collection); every file is checked against its listed
/// CRC32C. Returns the version's description plus ``downloaded_files``,
/// ``downloaded_bytes``, ``reused_files``.
#[pyfunction]
pub fn fetch<'py>(py: Python<'py>, location: &str, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let r = py
        .detach(|| Remote::open(location)?.fetch(&path))
        .map_err(remote_err)?;
    let d = published_dict(py, &r.published)?;
    d.set_item("downloaded_files", r.downloaded_files)?;
    d.set_item("downloaded_bytes", r.downloaded_bytes)?;
    d.set_item("reused_files", r.reused_files)?;
    Ok(d)
}

/// The latest version published at ``location``, or ``None``.
#[pyfunction]
pub fn published<'py>(py: Python<'py>, location: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
    let p = py
        .detach(|| Remote::open(location)?.latest())
        .map_err(remote_err)?;
    p.map(|p| published_dict(py, &p)).transpose()
}
