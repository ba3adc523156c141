//! The reference file (`references.json.gz`: `[{"vector": [14 numbers],
//! "label": "fraud" | "legit"}, ...]`) streamed into flat rows and labels,
//! and the index directory `build` writes and `serve` maps.

use crate::vectorize::{read_rules, Rules, DIM};
use anyhow::{bail, Context, Result};
use sagitta_lowdim::{LowDimIndex, LowDimView};
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// Label of a fraudulent reference in the index.
pub const FRAUD: u16 = 1;
/// Label of a legitimate reference.
pub const LEGIT: u16 = 0;

/// Rows (`n × 14`, row-major) and one label per row.
#[derive(Debug, Default)]
pub struct References {
    pub rows: Vec<f32>,
    pub labels: Vec<u16>,
}

#[derive(Deserialize)]
struct Row {
    vector: [f64; DIM],
    label: String,
}

struct Sink<'a>(&'a mut References);

impl<'de> Visitor<'de> for Sink<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of references")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(row) = seq.next_element::<Row>()? {
            let label = match row.label.as_str() {
                "fraud" => FRAUD,
                "legit" => LEGIT,
                other => return Err(de::Error::custom(format!("unknown label {other:?}"))),
            };
            self.0.rows.extend(row.vector.iter().map(|&x| x as f32));
            self.0.labels.push(label);
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Sink<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

/// Reads a (gzipped, if it ends in `.gz`) reference file, one row at a
/// time.
pub fn read(path: &Path) -> Result<References> {
    let file = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(BufReader::with_capacity(
            1 << 20,
            file,
        )))
    } else {
        Box::new(file)
    };
    let mut refs = References::default();
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 20, reader));
    Sink(&mut refs)
        .deserialize(&mut de)
        .with_context(|| format!("parse {}", path.display()))?;
    de.end()
        .with_context(|| format!("trailing data in {}", path.display()))?;
    if refs.labels.is_empty() {
        bail!("{}: no references", path.display());
    }
    Ok(refs)
}

/// The files of an index directory.
pub fn index_file(dir: &Path) -> PathBuf {
    dir.join("references.sgld")
}
fn norms_file(dir: &Path) -> PathBuf {
    dir.join("normalization.json")
}
fn mcc_file(dir: &Path) -> PathBuf {
    dir.join("mcc_risk.json")
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Builds the index directory: the index and a copy of the constants, so
/// the service needs nothing else.
pub fn build(refs: &References, rules_src: (&Path, &Path), out: &Path) -> Result<LowDimIndex> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let index = LowDimIndex::build(&refs.rows, DIM, Some(&refs.labels))?;
    if index.view().grid_scale() != Some(10_000.0) {
        bail!("references are not on the contest's 4-decimal grid");
    }
    write_atomic(&index_file(out), index.as_bytes())?;
    write_atomic(&norms_file(out), &std::fs::read(rules_src.0)?)?;
    write_atomic(&mcc_file(out), &std::fs::read(rules_src.1)?)?;
    std::fs::File::open(out)?.sync_all()?;
    Ok(index)
}

/// Checks an index directory (index checksums and structure, constants)
/// without keeping it mapped.
pub fn check(dir: &Path) -> Result<()> {
    let path = index_file(dir);
    let bytes = std::fs::File::open(&path).with_context(|| format!("open {}", path.display()))?;
    // SAFETY: read-only map, dropped before returning.
    let map =
        unsafe { memmap2::Mmap::map(&bytes) }.with_context(|| format!("map {}", path.display()))?;
    let view = LowDimView::parse(&map).with_context(|| format!("check {}", path.display()))?;
    if view.dim() != DIM || view.grid_scale() != Some(10_000.0) || !view.has_labels() {
        bail!("{} is not a fraud-scoring index", path.display());
    }
    read_rules(&norms_file(dir), &mcc_file(dir))?;
    let (v, newest) = (view.format_version(), sagitta_lowdim::FORMAT_VERSION);
    if v < newest {
        eprintln!(
            "sagitta-fraud: {} is format version {v}; `sagitta-fraud build` writes version \
             {newest}, which searches faster (same answers)",
            path.display()
        );
    }
    Ok(())
}

/// An index directory, mapped for the life of the process: the index
/// searched in place (its pages shared by every process through the page
/// cache) and the constants.
#[derive(Debug)]
pub struct Mapped {
    pub view: LowDimView<'static>,
    pub rules: Rules,
}

impl Mapped {
    /// Maps and checks the index (checksums and structure) and reads the
    /// constants; `prefault` reads every page once so the first requests
    /// do not fault.
    pub fn open(dir: &Path, prefault: bool) -> Result<Mapped> {
        let path = index_file(dir);
        let file =
            std::fs::File::open(&path).with_context(|| format!("open {}", path.display()))?;
        // SAFETY: read-only map of a file `build` writes once and renames
        // into place; nothing modifies it in place.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("map {}", path.display()))?;
        // The service maps one index for its whole life.
        let map: &'static memmap2::Mmap = Box::leak(Box::new(map));
        let view = LowDimView::parse(map).with_context(|| format!("check {}", path.display()))?;
        if view.dim() != DIM || view.grid_scale() != Some(10_000.0) || !view.has_labels() {
            bail!("{} is not a fraud-scoring index", path.display());
        }
        if prefault {
            // Parsing read every byte (the checksum); keep them resident.
            let _ = map.advise(memmap2::Advice::WillNeed);
        }
        let rules = read_rules(&norms_file(dir), &mcc_file(dir))?;
        Ok(Mapped { view, rules })
    }
}
