//! Durable file replacement, the one way the store puts a whole file in
//! place (segments, MANIFEST, tombstones, bloom filters, exports): the
//! bytes go to `name.tmp`, which is fsynced, renamed over `name`, and the
//! directory fsynced. A crash leaves the old file or the new one, never a
//! mix; a leftover `.tmp` is removed when the collection opens.

use crate::error::Result;
use crate::fault;
use std::path::{Path, PathBuf};

pub(crate) use fault::sync_dir;

/// `path` with `.tmp` appended: where durable writers stage a file.
pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes `bytes` to `path` durably: `path.tmp`, fsync, rename, fsync of
/// the directory. A crash leaves the old file or the new one, never a mix.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    replace(path, bytes)?;
    sync_dir(path)
}

/// [`write_durably`] without the directory fsync: the new file is in
/// place (whole, its bytes synced) but its name may not survive a power
/// loss until the directory is synced. On failure `path` is untouched.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let r = (|| {
        let mut f = fault::create(&tmp)?;
        fault::write_all(&mut f, bytes, &tmp)?;
        fault::sync_all(&f, &tmp)
    })();
    if r.is_err() {
        let _ = fault::remove(&tmp);
    }
    r?;
    let r = fault::rename(&tmp, path);
    if r.is_err() {
        let _ = fault::remove(&tmp);
    }
    r
}

/// Puts a file already written and synced at `tmp` in place at `path`
/// when `written` is `Ok`: renamed over `path`, then the directory
/// fsynced. On any error `tmp` is removed and `path` is untouched.
pub(crate) fn publish<T>(written: Result<T>, tmp: &Path, path: &Path) -> Result<T> {
    if written.is_err() {
        let _ = fault::remove(tmp);
    }
    let value = written?;
    if let Err(e) = fault::rename(tmp, path) {
        let _ = fault::remove(tmp);
        return Err(e);
    }
    sync_dir(path)?;
    Ok(value)
}
