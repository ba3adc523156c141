//! [`CollectionOptions`]: a collection's settings as a user spells them
//! (names, optional numbers), and the one parser that turns them into a
//! validated [`CollectionConfig`]. The server's create request (HTTP and
//! Flight), the Python package's `Collection.create` and the manifest
//! (`ConfigFile`) all translate into these options and call
//! [`CollectionOptions::to_config`]: one set of names, defaults, ranges
//! and error messages.

use crate::collection::config::{codes_named, CollectionConfig, ConfigFile, Durability};
use crate::error::{Result, StoreError};
use crate::ids::{IdType, STRING_ID_FIELD};
use crate::payload::{Field, FieldType};
use sagitta_index::{DType, HnswParams, IndexKind, IvfParams, Metric, Space};
use sagitta_text::{AnalyzerKind, TextFieldSpec};

/// A full-text field as a user names it: a payload string column and its
/// analyzer (`en`, the default, or `simple`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextFieldOption {
    /// The payload column.
    pub name: String,
    /// The analyzer's name (None: `en`).
    pub analyzer: Option<String>,
}

impl TextFieldOption {
    /// A field with the default (English) analyzer.
    pub fn named(name: impl Into<String>) -> Self {
        TextFieldOption {
            name: name.into(),
            analyzer: None,
        }
    }
}

/// Which payload columns a collection created by its first write (a
/// Flight DoPut into a missing dataset) indexes for full text (BM25), as
/// a server is configured (Longbow's `HYBRID_SEARCH_ENABLED` and
/// `HYBRID_TEXT_COLUMNS`). Text fields stay payload columns too
/// (returned, filterable); they are chosen once, when the collection is
/// created, from the first write's columns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TextColumns {
    /// No text fields.
    Off,
    /// Every string column of the first write (the default).
    #[default]
    Strings,
    /// The named columns, those of the first write that are strings
    /// (a name it lacks, or holds in another type, is skipped, as
    /// Longbow skips it).
    Named(Vec<String>),
}

impl TextColumns {
    /// The rule of Longbow's two settings: `enabled` false turns text
    /// indexing off; otherwise `columns` (comma-separated; blanks around
    /// names dropped) names the columns, and none named (or neither
    /// setting given) means every string column.
    pub fn from_settings(enabled: Option<bool>, columns: Option<&str>) -> TextColumns {
        let named: Vec<String> = columns
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect();
        match enabled {
            Some(false) => TextColumns::Off,
            _ if named.is_empty() => TextColumns::Strings,
            _ => TextColumns::Named(named),
        }
    }

    /// The text fields (English analyzer) of a collection whose first
    /// write has the payload columns `fields`; the reserved string-id
    /// column is never one.
    pub fn fields(&self, fields: &[Field]) -> Vec<TextFieldOption> {
        let text = |name: &str| {
            name != STRING_ID_FIELD
                && fields
                    .iter()
                    .any(|f| f.name == name && f.ty == FieldType::String)
        };
        let names: Vec<&str> = match self {
            TextColumns::Off => Vec::new(),
            TextColumns::Strings => fields.iter().map(|f| f.name.as_str()).collect(),
            TextColumns::Named(n) => n.iter().map(String::as_str).collect(),
        };
        let mut out: Vec<TextFieldOption> = Vec::new();
        for n in names {
            if text(n) && !out.iter().any(|o| o.name == n) {
                out.push(TextFieldOption::named(n));
            }
        }
        out
    }
}

/// A collection's settings as given by a user; `None` is the default.
/// [`Self::to_config`] parses and validates them, the one place that
/// does (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectionOptions {
    /// Vector dimensions (bits for hamming / nphd).
    pub dims: usize,
    /// `cos` (default), `l2`, `ip`, `hamming` or `nphd`.
    pub metric: Option<String>,
    /// `f32` (default for float metrics), `f16`, `i8`, `sq8`, `sq16`,
    /// `b1` (the default and only type of binary metrics).
    pub dtype: Option<String>,
    /// `hnsw` (default), `flat` or `ivf_rq`.
    pub kind: Option<String>,
    /// HNSW links per node (default 16).
    pub m: Option<usize>,
    /// HNSW beam width while inserting (default 128).
    pub ef_construction: Option<usize>,
    /// HNSW default beam width while searching (default 64).
    pub ef_search: Option<usize>,
    /// Seed of the graph's levels (default: [`HnswParams::default`]'s).
    pub seed: Option<u64>,
    /// IVF-RaBitQ: bits per dimension (1..=8, default 1).
    pub ivf_bits: Option<u8>,
    /// IVF-RaBitQ: partitions (default: one per `ivf_partition_size` rows).
    pub ivf_partitions: Option<usize>,
    /// IVF-RaBitQ: target rows per partition.
    pub ivf_partition_size: Option<usize>,
    /// IVF-RaBitQ: partitions probed per query (default 8).
    pub ivf_nprobe: Option<usize>,
    /// IVF-RaBitQ: rows re-ranked at full precision (default by bits).
    pub ivf_refine: Option<usize>,
    /// Graph codes of built HNSW segments: `sq8`, `f16`, `sq16` or
    /// `none` (default: [`crate::default_codes`]).
    pub codes: Option<String>,
    /// Bytes of the mutable part before it is frozen (default 64 MiB).
    pub segment_size: Option<u64>,
    /// Largest segment a merge makes (default 16 GiB; at least
    /// `segment_size`).
    pub max_segment_size: Option<u64>,
    /// Milliseconds without writes before a non-empty mutable part is
    /// frozen (default 1000; 0 never).
    pub idle_seal_ms: Option<u64>,
    /// Threads of background builds (default 0: one per core).
    pub optimizer_threads: Option<usize>,
    /// WAL policy: `batch` (default), `off`, or milliseconds (`100ms`).
    pub durability: Option<String>,
    /// `uint64` (default), `int64`, `string` or `uint128`.
    pub id_type: Option<String>,
    /// Key width: 64 or 128 (128 means `id_type` uint128). Given with an
    /// `id_type`, the two must agree.
    pub key_bits: Option<u32>,
    /// Full-text (BM25) fields.
    pub text_fields: Vec<TextFieldOption>,
    /// A built-in embedding model for the first text field.
    pub embed_model: Option<String>,
    /// BM25 k1 (default 0.9).
    pub bm25_k1: Option<f32>,
    /// BM25 b (default 0.4).
    pub bm25_b: Option<f32>,
    /// HNSW: rows under which a segment stays without a graph (default:
    /// the planner's cost model; 0: every segment gets one).
    pub index_threshold: Option<u64>,
}

fn bad(msg: String) -> StoreError {
    StoreError::Config(msg)
}

/// A metric by name (the one reading of the option).
pub fn parse_metric(name: &str) -> Result<Metric> {
    Metric::parse(name).ok_or_else(|| {
        bad(format!(
            "metric: unknown metric {name:?} (cos, l2, ip, hamming or nphd)"
        ))
    })
}

/// A storage type by name.
pub fn parse_dtype(name: &str) -> Result<DType> {
    DType::parse(name).ok_or_else(|| {
        bad(format!(
            "dtype: unknown dtype {name:?} (f32, f16, i8, sq8, sq16 or b1)"
        ))
    })
}

/// An index kind by name.
pub fn parse_kind(name: &str) -> Result<IndexKind> {
    IndexKind::parse(name).ok_or_else(|| {
        bad(format!(
            "kind: unknown index kind {name:?} (hnsw, flat or ivf_rq)"
        ))
    })
}

/// A durability policy by name.
pub fn parse_durability(name: &str) -> Result<Durability> {
    Durability::parse(name).ok_or_else(|| {
        bad(format!(
            "durability: unknown policy {name:?} (batch, off, or milliseconds like 100ms)"
        ))
    })
}

/// An id type by name.
pub fn parse_id_type(name: &str) -> Result<IdType> {
    IdType::parse(name).ok_or_else(|| {
        bad(format!(
            "id_type: unknown type {name:?} (uint64, int64, string or uint128)"
        ))
    })
}

/// The space of `dims`, `metric` and `dtype` (a binary metric's default
/// dtype is b1, else f32).
pub fn parse_space(dims: usize, metric: Option<&str>, dtype: Option<&str>) -> Result<Space> {
    let metric = parse_metric(metric.unwrap_or("cos"))?;
    let dtype = match dtype {
        None if metric.is_binary() => DType::B1,
        None => DType::F32,
        Some(d) => parse_dtype(d)?,
    };
    Ok(Space::new(dims, metric, dtype)?)
}

impl CollectionOptions {
    /// Options of a collection of `dims` dimensions, every other setting
    /// the default.
    pub fn new(dims: usize) -> Self {
        CollectionOptions {
            dims,
            ..CollectionOptions::default()
        }
    }

    /// The settings these options give, parsed and validated (ranges of
    /// the index parameters, codes against the space, text fields, the
    /// embedding model's needs): the one parser of collection options.
    pub fn to_config(&self) -> Result<CollectionConfig> {
        let space = parse_space(self.dims, self.metric.as_deref(), self.dtype.as_deref())?;
        let mut cfg = CollectionConfig::new(space);
        if let Some(k) = self.kind.as_deref() {
            cfg.kind = parse_kind(k)?;
        }
        let h = HnswParams::default();
        cfg.hnsw = HnswParams {
            m: self.m.unwrap_or(h.m),
            ef_construction: self.ef_construction.unwrap_or(h.ef_construction),
            ef_search: self.ef_search.unwrap_or(h.ef_search),
            seed: self.seed.unwrap_or(h.seed),
        };
        let i = IvfParams::default();
        cfg.ivf = IvfParams {
            bits: self.ivf_bits.unwrap_or(i.bits),
            partitions: self.ivf_partitions.or(i.partitions),
            partition_size: self.ivf_partition_size.unwrap_or(i.partition_size),
            nprobe: self.ivf_nprobe.unwrap_or(i.nprobe),
            refine: self.ivf_refine.or(i.refine),
            ..i
        };
        cfg.ivf.validate()?;
        // The same default whether `dtype` is spelled out or not (a
        // collection a Flight DoPut creates names the dtype of its
        // vectors).
        cfg.codes = codes_named(self.codes.as_deref(), &space)?;
        if let Some(s) = self.segment_size {
            cfg.segment_size = s;
        }
        cfg.max_segment_size = self
            .max_segment_size
            .unwrap_or(cfg.max_segment_size)
            .max(cfg.segment_size);
        if let Some(ms) = self.idle_seal_ms {
            cfg.idle_seal_ms = ms;
        }
        if let Some(t) = self.optimizer_threads {
            cfg.optimizer_threads = t;
        }
        if let Some(p) = self.durability.as_deref() {
            cfg.durability = parse_durability(p)?;
        }
        match (self.id_type.as_deref(), self.key_bits) {
            // Neither given: open until the first write by ids fixes it.
            (None, None) => cfg.id_type_open = true,
            (None, Some(bits)) => cfg = cfg.with_key_bits(bits),
            (Some(t), bits) => {
                cfg.id_type = parse_id_type(t)?;
                cfg.key_bits = bits.unwrap_or(cfg.id_type.key_bits());
            }
        }
        cfg.text = self
            .text_fields
            .iter()
            .map(|f| {
                let a = f.analyzer.as_deref().unwrap_or("en");
                let analyzer = AnalyzerKind::parse(a).ok_or_else(|| {
                    bad(format!(
                        "text_fields: {:?}: unknown analyzer {a:?} (en or simple)",
                        f.name
                    ))
                })?;
                Ok(TextFieldSpec::new(f.name.clone(), analyzer))
            })
            .collect::<Result<_>>()?;
        cfg.embed_model = self.embed_model.clone();
        if let Some(k1) = self.bm25_k1 {
            cfg.bm25.k1 = k1;
        }
        if let Some(b) = self.bm25_b {
            cfg.bm25.b = b;
        }
        cfg.index_threshold = self.index_threshold;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The options that give `cfg` back ([`Self::to_config`] of them
    /// equals `cfg`): how a manifest records a collection's settings.
    pub fn from_config(cfg: &CollectionConfig) -> Self {
        CollectionOptions {
            dims: cfg.space.dims,
            metric: Some(cfg.space.metric.name().into()),
            dtype: Some(cfg.space.dtype.name().into()),
            kind: Some(cfg.kind.name().into()),
            m: Some(cfg.hnsw.m),
            ef_construction: Some(cfg.hnsw.ef_construction),
            ef_search: Some(cfg.hnsw.ef_search),
            seed: Some(cfg.hnsw.seed),
            ivf_bits: Some(cfg.ivf.bits),
            ivf_partitions: cfg.ivf.partitions,
            ivf_partition_size: Some(cfg.ivf.partition_size),
            ivf_nprobe: Some(cfg.ivf.nprobe),
            ivf_refine: cfg.ivf.refine,
            codes: Some(cfg.codes.map_or("none", |d| d.name()).into()),
            segment_size: Some(cfg.segment_size),
            max_segment_size: Some(cfg.max_segment_size),
            idle_seal_ms: Some(cfg.idle_seal_ms),
            optimizer_threads: Some(cfg.optimizer_threads),
            durability: Some(cfg.durability.name()),
            id_type: (!cfg.id_type_left_open()).then(|| cfg.id_type.name().into()),
            key_bits: (!cfg.id_type_left_open()).then_some(cfg.key_bits),
            text_fields: cfg
                .text
                .iter()
                .map(|f| TextFieldOption {
                    name: f.name.clone(),
                    analyzer: Some(f.analyzer.name().into()),
                })
                .collect(),
            embed_model: cfg.embed_model.clone(),
            // As the manifest: BM25's parameters only with text fields.
            bm25_k1: (!cfg.text.is_empty()).then_some(cfg.bm25.k1),
            bm25_b: (!cfg.text.is_empty()).then_some(cfg.bm25.b),
            index_threshold: cfg.index_threshold,
        }
    }
}

impl From<&ConfigFile> for CollectionOptions {
    /// The options a manifest records (fields absent from older
    /// manifests are their defaults): the manifest's settings are read by
    /// the one parser, [`CollectionOptions::to_config`].
    fn from(f: &ConfigFile) -> Self {
        CollectionOptions {
            dims: f.dims,
            metric: Some(f.metric.clone()),
            dtype: Some(f.dtype.clone()),
            kind: Some(f.kind.clone()),
            m: Some(f.m),
            ef_construction: Some(f.ef_construction),
            ef_search: Some(f.ef_search),
            seed: Some(f.seed),
            ivf_bits: Some(f.ivf_bits),
            ivf_partitions: f.ivf_partitions,
            ivf_partition_size: Some(f.ivf_partition_size),
            ivf_nprobe: Some(f.ivf_nprobe),
            ivf_refine: f.ivf_refine,
            // Absent in manifests made before graph codes: none.
            codes: Some(f.codes.clone().unwrap_or_else(|| "none".into())),
            segment_size: Some(f.segment_size),
            max_segment_size: Some(f.max_segment_size),
            idle_seal_ms: Some(f.idle_seal_ms),
            optimizer_threads: Some(f.optimizer_threads),
            durability: Some(f.durability.clone()),
            id_type: f.id_type.clone(),
            key_bits: Some(f.key_bits),
            text_fields: f
                .text
                .iter()
                .map(|t| TextFieldOption {
                    name: t.name.clone(),
                    analyzer: Some(t.analyzer.clone()),
                })
                .collect(),
            embed_model: f.embed_model.clone(),
            bm25_k1: f.bm25_k1,
            bm25_b: f.bm25_b,
            index_threshold: f.index_threshold,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn err(o: &CollectionOptions) -> String {
        match o.to_config() {
            Err(StoreError::Config(m)) => m,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_config_defaults() {
        let o = CollectionOptions::new(8);
        let space = Space::new(8, Metric::Cos, DType::F32).unwrap();
        // The one difference: no id type given leaves it open (to the
        // first write by ids).
        let open = CollectionConfig {
            id_type_open: true,
            ..CollectionConfig::new(space)
        };
        assert_eq!(o.to_config().unwrap(), open);
        let bits = CollectionOptions {
            metric: Some("hamming".into()),
            ..CollectionOptions::new(256)
        };
        assert_eq!(bits.to_config().unwrap().space.dtype, DType::B1);
    }

    #[test]
    fn every_setting_round_trips_through_from_config() {
        let o = CollectionOptions {
            metric: Some("l2".into()),
            kind: Some("ivf_rq".into()),
            ivf_bits: Some(4),
            ivf_partitions: Some(12),
            ivf_nprobe: Some(5),
            ivf_refine: Some(40),
            segment_size: Some(1 << 20),
            durability: Some("100ms".into()),
            id_type: Some("string".into()),
            text_fields: vec![TextFieldOption {
                name: "body".into(),
                analyzer: Some("simple".into()),
            }],
            bm25_k1: Some(1.2),
            index_threshold: Some(0),
            ..CollectionOptions::new(16)
        };
        let cfg = o.to_config().unwrap();
        assert_eq!(cfg.ivf.bits, 4);
        assert_eq!(cfg.ivf.partitions, Some(12));
        assert_eq!(cfg.id_type, IdType::String);
        let back = CollectionOptions::from_config(&cfg).to_config().unwrap();
        assert_eq!(back, cfg);
    }

    /// Found by the request_json fuzzer (fuzz/seeds): BM25 parameters on a
    /// collection without text fields were accepted and then lost at
    /// reopen (the manifest records them with the fields). They are a
    /// config error now; the defaults and a collection without text still
    /// round-trip.
    #[test]
    fn bm25_parameters_need_text_fields() {
        let o = CollectionOptions {
            bm25_k1: Some(1.2),
            bm25_b: Some(0.5),
            ..CollectionOptions::new(4)
        };
        assert!(err(&o).starts_with("bm25_k1 = 1.2, bm25_b = 0.5: BM25 ranks text fields"));
        let defaults = CollectionOptions {
            bm25_k1: Some(0.9),
            bm25_b: Some(0.4),
            id_type: Some("string".into()),
            ..CollectionOptions::new(4)
        };
        let cfg = defaults.to_config().unwrap();
        let back = CollectionOptions::from_config(&cfg);
        assert_eq!((back.bm25_k1, back.bm25_b), (None, None));
        assert_eq!(back.to_config().unwrap(), cfg);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        drop(crate::Collection::create(&path, cfg.clone()).unwrap());
        let c = crate::Collection::open(&path, crate::OpenMode::ReadOnly).unwrap();
        assert_eq!(c.config(), &cfg);
    }

    #[test]
    fn text_columns_of_a_first_write_follow_longbows_settings() {
        let f = |name: &str, ty| Field {
            name: name.into(),
            ty,
        };
        let cols = [
            f("meta", FieldType::String),
            f("n", FieldType::Int64),
            f("category", FieldType::String),
            f(STRING_ID_FIELD, FieldType::String),
            f("tags", FieldType::Tags),
        ];
        let names = |t: TextColumns| -> Vec<String> {
            t.fields(&cols).into_iter().map(|o| o.name).collect()
        };
        let strings = TextColumns::from_settings(None, None);
        assert_eq!(strings, TextColumns::Strings);
        assert_eq!(names(strings), ["meta", "category"]);
        assert_eq!(
            TextColumns::from_settings(Some(true), Some(" , ")),
            TextColumns::Strings
        );
        assert_eq!(
            TextColumns::from_settings(Some(false), Some("meta")),
            TextColumns::Off
        );
        assert!(names(TextColumns::Off).is_empty());
        // Named: in the order named, once each; absent, non-string and
        // reserved columns skipped.
        let named = TextColumns::from_settings(None, Some("category, n,absent,meta,category"));
        assert_eq!(names(named), ["category", "meta"]);
        let one = TextColumns::from_settings(Some(true), Some("meta"));
        assert_eq!(names(one.clone()), ["meta"]);
        let opts = CollectionOptions {
            text_fields: one.fields(&cols),
            ..CollectionOptions::new(4)
        };
        assert_eq!(opts.to_config().unwrap().text_fields().len(), 1);
    }

    #[test]
    fn bad_options_name_the_option() {
        let with = |f: fn(&mut CollectionOptions)| {
            let mut o = CollectionOptions::new(8);
            f(&mut o);
            err(&o)
        };
        assert!(with(|o| o.metric = Some("manhattan".into())).starts_with("metric: unknown"));
        assert!(with(|o| o.dtype = Some("f64".into())).starts_with("dtype: unknown"));
        assert!(with(|o| o.kind = Some("ivf".into())).starts_with("kind: unknown"));
        assert!(with(|o| o.durability = Some("soon".into())).starts_with("durability:"));
        assert!(with(|o| o.id_type = Some("uuid".into())).starts_with("id_type:"));
        assert!(with(|o| o.codes = Some("i8".into())).starts_with("codes:"));
        assert!(with(|o| o.segment_size = Some(10)).contains("segment_size"));
        let m = with(|o| {
            o.text_fields = vec![TextFieldOption {
                name: "t".into(),
                analyzer: Some("klingon".into()),
            }]
        });
        assert!(m.contains("unknown analyzer"), "{m}");
        let ivf = CollectionOptions {
            kind: Some("ivf_rq".into()),
            ivf_bits: Some(9),
            ..CollectionOptions::new(8)
        };
        assert!(matches!(ivf.to_config(), Err(StoreError::Index(_))));
        let ids = CollectionOptions {
            id_type: Some("uint64".into()),
            key_bits: Some(128),
            ..CollectionOptions::new(8)
        };
        assert!(err(&ids).contains("key_bits"));
    }
}
