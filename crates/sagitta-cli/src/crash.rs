//! `sagitta crash-writer`: the writer process of the crash-safety test
//! (`tests/crash.rs`), which SIGKILLs it at random moments.
//!
//! Protocol on stdout, one line per event, written before / after each
//! operation: `BEGIN <n> <kind> [<key>:<version> | <key>]...` and
//! `ACK <n>` once the operation returned (was acknowledged). The vector of
//! a (key, version) is [`crash_vector`]`(version)`; versions are unique.

use anyhow::Result;
use sagitta_index::{DType, Metric, Space, VectorRef};
use sagitta_store::{Collection, CollectionConfig, Durability, OpenMode};
use std::fmt::Write as _;
use std::path::Path;

/// Dimensions of the crash-test vectors.
pub const DIMS: usize = 8;

/// The vector logged for `version` (finite, distinct per version).
pub fn crash_vector(version: u64) -> Vec<f32> {
    let mut z = version.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..DIMS)
        .map(|_| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            (z >> 40) as f32 / (1u64 << 20) as f32
        })
        .collect()
}

/// Runs `ops` random operations against the collection in `dir`
/// (created on first use), printing the protocol lines.
pub fn run(dir: &Path, round: u64, ops: usize, keys: u64) -> Result<()> {
    let c = if dir.join("MANIFEST").exists() {
        Collection::open(dir, OpenMode::ReadWrite)?
    } else {
        let mut cfg = CollectionConfig::new(Space::new(DIMS, Metric::L2, DType::F32)?);
        cfg.segment_size = 300 * cfg.bytes_per_vector();
        cfg.durability = Durability::Batch;
        Collection::create(dir, cfg)?
    };
    let mut z = round.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let mut rand = move |n: u64| {
        z ^= z << 13;
        z ^= z >> 7;
        z ^= z << 17;
        z % n.max(1)
    };
    for n in 0..ops as u64 {
        let kind = rand(100);
        let size = 1 + rand(60) as usize;
        let mut line = format!("BEGIN {n}");
        match kind {
            0..=69 | 85..=89 => {
                let once = kind >= 85;
                let mut ks = Vec::with_capacity(size);
                let mut rows = Vec::with_capacity(size);
                line.push_str(if once { " add_once" } else { " upsert" });
                for i in 0..size as u64 {
                    let key = rand(keys);
                    if ks.contains(&key) {
                        continue;
                    }
                    let version = round * 1_000_000_000 + n * 1000 + i;
                    let _ = write!(line, " {key}:{version}");
                    ks.push(key);
                    rows.push(crash_vector(version));
                }
                println!("{line}");
                let refs: Vec<VectorRef<'_>> = rows.iter().map(|r| VectorRef::F32(r)).collect();
                if once {
                    c.add_once(&ks, &refs)?;
                } else {
                    c.upsert(&ks, &refs)?;
                }
            }
            70..=84 => {
                line.push_str(" remove");
                let ks: Vec<u64> = (0..size).map(|_| rand(keys)).collect();
                for k in &ks {
                    let _ = write!(line, " {k}");
                }
                println!("{line}");
                c.remove(&ks)?;
            }
            90..=94 => {
                println!("{line} compact");
                c.compact()?;
            }
            _ => {
                println!("{line} seal");
                c.seal()?;
            }
        }
        println!("ACK {n}");
    }
    Ok(())
}
