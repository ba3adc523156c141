//! A reader for the 2-D `.npy` matrices the tools and tests load
//! (`<f2`, `<f4`, `<i4`, C order), e.g. `../shared/data/debian-minilm`.
//! Not a general NumPy reader: it refuses what it does not understand with
//! a typed error.

use sagitta_kernels::f16;
use std::path::{Path, PathBuf};

/// Why a `.npy` file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The operating system refused to read or write the file.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// "read" or "write".
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a `.npy` matrix this reader understands.
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// The result of a `.npy` read or write.
pub type Result<T> = std::result::Result<T, NpyError>;

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> NpyError + 'a {
    move |source| NpyError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// A row-major matrix read from a `.npy` file, converted to `T`.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix<T> {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// `rows * cols` values, row-major.
    pub data: Vec<T>,
}

impl<T> Matrix<T> {
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[T] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> NpyError {
    NpyError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn parse(path: &Path) -> Result<(String, usize, usize, Vec<u8>)> {
    let bytes = std::fs::read(path).map_err(io("read", path))?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad(path, "not a .npy file"));
    }
    let (hlen, hstart) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(path, format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(hstart..hstart + hlen)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad(path, "truncated header"))?;
    let field = |name: &str| -> Option<&str> {
        let at = header.find(&format!("'{name}':"))? + name.len() + 3;
        Some(header[at..].trim_start())
    };
    let descr = field("descr")
        .and_then(|d| d.strip_prefix('\''))
        .and_then(|d| d.split('\'').next())
        .ok_or_else(|| bad(path, "no descr"))?
        .to_string();
    if field("fortran_order").is_some_and(|f| f.starts_with("True")) {
        return Err(bad(path, "Fortran order is not supported"));
    }
    let shape = field("shape")
        .and_then(|s| s.strip_prefix('('))
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad(path, "no shape"))?;
    let dims: Vec<usize> = shape
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| x.trim().parse().unwrap_or(usize::MAX))
        .collect();
    let (rows, cols) = match dims[..] {
        [r, c] if r != usize::MAX && c != usize::MAX => (r, c),
        [r] if r != usize::MAX => (r, 1),
        _ => {
            return Err(bad(
                path,
                format!("shape ({shape}) is not a 1-D or 2-D matrix"),
            ))
        }
    };
    let data = bytes[hstart + hlen..].to_vec();
    Ok((descr, rows, cols, data))
}

fn check_len(path: &Path, data: &[u8], rows: usize, cols: usize, size: usize) -> Result<()> {
    let want = rows
        .checked_mul(cols)
        .and_then(|x| x.checked_mul(size))
        .ok_or_else(|| bad(path, "shape overflows"))?;
    if data.len() < want {
        return Err(bad(
            path,
            format!("truncated: {} data bytes, shape needs {want}", data.len()),
        ));
    }
    Ok(())
}

/// Reads a float matrix (`<f2` or `<f4`) as f32.
pub fn read_f32(path: &Path) -> Result<Matrix<f32>> {
    let (descr, rows, cols, data) = parse(path)?;
    let data = match descr.as_str() {
        "<f2" => {
            check_len(path, &data, rows, cols, 2)?;
            data.chunks_exact(2)
                .take(rows * cols)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect()
        }
        "<f4" => {
            check_len(path, &data, rows, cols, 4)?;
            data.chunks_exact(4)
                .take(rows * cols)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        }
        d => return Err(bad(path, format!("dtype {d} is not f2/f4"))),
    };
    Ok(Matrix { rows, cols, data })
}

/// Reads an `<i4` matrix.
pub fn read_i32(path: &Path) -> Result<Matrix<i32>> {
    let (descr, rows, cols, data) = parse(path)?;
    if descr != "<i4" {
        return Err(bad(path, format!("dtype {descr} is not i4")));
    }
    check_len(path, &data, rows, cols, 4)?;
    let data = data
        .chunks_exact(4)
        .take(rows * cols)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(Matrix { rows, cols, data })
}

/// Writes a `<f2` matrix (used to cut the demo sample).
pub fn write_f16(path: &Path, rows: usize, cols: usize, data: &[f32]) -> Result<()> {
    let mut header =
        format!("{{'descr': '<f2', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len() * 2);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in &data[..rows * cols] {
        out.extend_from_slice(&f16::from_f32(*v).to_le_bytes());
    }
    std::fs::write(path, out).map_err(io("write", path))
}
