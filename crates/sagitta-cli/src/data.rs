//! Loading dataset directories laid out like `../shared/data/debian-minilm`.

use crate::npy::{self, Matrix};
use anyhow::{Context, Result};
use std::io::BufRead;
use std::path::Path;

/// A dataset directory's matrices (and, when asked for, its texts).
#[derive(Debug)]
pub struct Dataset {
    pub base: Matrix<f32>,
    pub queries: Matrix<f32>,
    pub gt: Option<Matrix<i32>>,
    pub base_texts: Vec<String>,
    pub query_texts: Vec<String>,
}

/// The lines of a gzipped text file.
pub fn texts(path: &Path) -> Result<Vec<String>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let r = std::io::BufReader::new(flate2::read::GzDecoder::new(f));
    r.lines()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", path.display()))
}

/// Loads `base.f16.npy`, `queries.f16.npy`, `gt.i32.npy` when there, and
/// (`with_texts`) the gzipped texts of the base rows and queries.
pub fn load(dir: &Path, with_texts: bool) -> Result<Dataset> {
    let m = |name: &str| {
        npy::read_f32(&dir.join(name))
            .with_context(|| format!("reading {}", dir.join(name).display()))
    };
    let gt_path = dir.join("gt.i32.npy");
    Ok(Dataset {
        base: m("base.f16.npy")?,
        queries: m("queries.f16.npy")?,
        gt: if gt_path.exists() {
            Some(npy::read_i32(&gt_path)?)
        } else {
            None
        },
        base_texts: if with_texts {
            texts(&dir.join("base_texts.txt.gz"))?
        } else {
            vec![]
        },
        query_texts: if with_texts {
            texts(&dir.join("query_texts.txt.gz"))?
        } else {
            vec![]
        },
    })
}
