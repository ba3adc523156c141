//! `sagitta search`: a text, hybrid or vector search of a collection
//! directory (opened read-only, so a running server may hold it), printed
//! one hit per line with each leg's rank and the row's text.

use anyhow::{bail, Context, Result};
use sagitta_index::VectorRef;
use sagitta_store::{Collection, CollectionSearch, Filter, Fusion, OpenMode, Query, Value};
use std::path::PathBuf;

/// Arguments of `sagitta search`.
#[derive(clap::Args, Debug)]
pub struct SearchArgs {
    /// The collection's directory (e.g. DATA/NAME of `sagitta serve`).
    pub collection: PathBuf,
    /// Text query: BM25, fused with the dense leg when the collection
    /// embeds text or `--like` gives a vector.
    #[arg(long)]
    pub text: Option<String>,
    /// Use the stored vector of this key as the dense query.
    #[arg(long)]
    pub like: Option<u64>,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// alpha (default, 0.3), rrf or dbsf.
    #[arg(long)]
    pub fusion: Option<String>,
    /// Weight of the dense leg for alpha fusion (1: dense only, 0: text only).
    #[arg(long)]
    pub alpha: Option<f32>,
    /// Candidates per leg (default max(k, 20)).
    #[arg(long)]
    pub depth: Option<usize>,
    /// Payload filter as JSON (docs/API.md).
    #[arg(long = "where")]
    pub filter: Option<String>,
}

/// Runs `sagitta search`.
pub fn run(a: &SearchArgs) -> Result<()> {
    let c = Collection::open(&a.collection, OpenMode::ReadOnly)
        .with_context(|| format!("opening {}", a.collection.display()))?;
    let bound = match &a.filter {
        Some(f) => Some(c.bind_filter(&Filter::from_json(f)?)?),
        None => None,
    };
    let opts = CollectionSearch {
        predicate: bound.as_ref(),
        ..CollectionSearch::default()
    };
    let like: Option<Vec<f32>> = match a.like {
        Some(k) => {
            if c.config().space.dtype != sagitta_index::DType::F32 {
                bail!("--like needs a float32 collection");
            }
            let raw = c
                .get_raw(k)
                .with_context(|| format!("key {k} is not in the collection"))?;
            Some(
                raw.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            )
        }
        None => None,
    };
    let fusion =
        Fusion::from_args(a.fusion.as_deref(), a.alpha, None).map_err(anyhow::Error::msg)?;
    let hits: Vec<(u64, f32, String)> = match (&a.text, &like) {
        (Some(text), _) => c
            .search_text(&Query {
                text: Some(text),
                vectors: like.as_deref().map(VectorRef::F32).into_iter().collect(),
                k: a.k,
                fusion,
                depth: a.depth,
                opts,
            })?
            .into_iter()
            .map(|h| {
                let leg = |l: Option<(u32, f32)>| {
                    l.map_or("-".to_string(), |(r, s)| format!("#{r} {s:.4}"))
                };
                (
                    h.key,
                    h.score,
                    format!("dense {:>14}  text {:>14}", leg(h.dense), leg(h.text)),
                )
            })
            .collect(),
        (None, Some(v)) => c
            .search(&[VectorRef::F32(v)], a.k, &opts)?
            .pop()
            .unwrap_or_default()
            .into_iter()
            .map(|n| (n.key, n.distance, String::new()))
            .collect(),
        (None, None) => bail!("give --text, --like KEY, or both"),
    };
    let keys: Vec<u64> = hits.iter().map(|h| h.0).collect();
    let rows = c.payload_rows(&keys)?;
    let schema = c.schema();
    let field = c.config().text.first().map(|f| f.name.clone());
    for (i, ((key, score, legs), row)) in hits.iter().zip(rows).enumerate() {
        let text = field
            .as_ref()
            .and_then(|f| schema.index_of(f))
            .and_then(|j| row.as_ref().and_then(|r| r.get(j).cloned()));
        let text = match text {
            Some(Value::Str(s)) => s.chars().take(90).collect::<String>(),
            _ => String::new(),
        };
        println!("{:>3}  {key:>10}  {score:>9.5}  {legs}  {text}", i + 1);
    }
    Ok(())
}
