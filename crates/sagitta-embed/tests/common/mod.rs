//! Readers for the sample data, shared by the tests and the examples
//! (`#[path]`-included there).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The lines of a gzip text file (one text per line), at most `limit`.
pub fn read_gz_lines(path: &Path, limit: usize) -> std::io::Result<Vec<String>> {
    let file = std::fs::File::open(path)?;
    let reader = BufReader::new(flate2::read::GzDecoder::new(file));
    reader.lines().take(limit).collect()
}

/// The first `limit` rows of a 2-D little-endian float16 `.npy` file, as
/// f32: `(rows, columns, values)`.
pub fn read_f16_npy(path: &Path, limit: usize) -> std::io::Result<(usize, usize, Vec<f32>)> {
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let mut file = std::fs::File::open(path)?;
    let mut head = [0u8; 12];
    file.read_exact(&mut head)?;
    if &head[..6] != b"\x93NUMPY" {
        return Err(bad(format!("{} is not a .npy file", path.display())));
    }
    let (header_len, consumed) = match head[6] {
        1 => (u16::from_le_bytes([head[8], head[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize,
            12,
        ),
    };
    let mut header = vec![0u8; consumed + header_len - head.len()];
    file.read_exact(&mut header)?;
    let text = [&head[consumed..], &header[..]].concat();
    let text = String::from_utf8_lossy(&text);
    if !text.contains("'descr': '<f2'") || text.contains("'fortran_order': True") {
        return Err(bad(format!(
            "{}: want C-order <f2, got {text}",
            path.display()
        )));
    }
    let shape = text
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad(format!("no shape in {text}")))?;
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad(format!("bad shape {shape}"))))
        .collect::<Result<_, _>>()?;
    let [rows, cols] = dims[..] else {
        return Err(bad(format!("shape {shape} is not 2-D")));
    };
    let rows = rows.min(limit);
    let mut bytes = vec![0u8; rows * cols * 2];
    file.read_exact(&mut bytes)?;
    let values = bytes
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect();
    Ok((rows, cols, values))
}

/// Cosine of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb).max(f32::MIN_POSITIVE)
}

/// Row-wise cosines of two row-major matrices of `dims` columns: (min, mean).
pub fn cosine_stats(a: &[f32], b: &[f32], dims: usize) -> (f32, f32) {
    let cos: Vec<f32> = a
        .chunks_exact(dims)
        .zip(b.chunks_exact(dims))
        .map(|(x, y)| cosine(x, y))
        .collect();
    let min = cos.iter().copied().fold(f32::INFINITY, f32::min);
    let mean = cos.iter().map(|&c| c as f64).sum::<f64>() / cos.len().max(1) as f64;
    (min, mean as f32)
}
