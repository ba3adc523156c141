//! all-MiniLM-L6-v2 against the vectors of the sample dataset. These tests
//! need the model: run `scripts/fetch-model` first (they fail without it).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{cosine_stats, read_f16_npy, read_gz_lines};
use sagitta_embed::{
    model_dir, EmbedError, Embedder, Precision, DEFAULT_MODEL, DEFAULT_PRECISION, TOKENIZER_FILE,
    WEIGHTS_FILE,
};

fn sample(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/sample")
        .join(file)
}

fn embedder() -> &'static Embedder {
    static EMBEDDER: OnceLock<Embedder> = OnceLock::new();
    EMBEDDER.get_or_init(|| {
        Embedder::open(DEFAULT_MODEL).unwrap_or_else(|e| {
            panic!("cannot open {DEFAULT_MODEL} (run scripts/fetch-model): {e}")
        })
    })
}

fn assert_unit_rows(vectors: &[f32], dims: usize) {
    for row in vectors.chunks_exact(dims) {
        assert!(row.iter().all(|v| v.is_finite()));
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
}

#[test]
fn embedder_is_send_sync_debug() {
    fn check<T: Send + Sync + std::fmt::Debug>() {}
    check::<Embedder>();
    let e = embedder();
    assert_eq!(e.name(), DEFAULT_MODEL);
    assert_eq!(e.dims(), 384);
    assert_eq!(e.max_tokens(), 256);
    assert!(format!("{e:?}").contains("all-minilm-l6-v2"));
}

/// The dataset's vectors were computed with truncation at 128 word pieces
/// (the `truncation` of the model's tokenizer.json), not at the 256 that
/// sentence-transformers uses (`sentence_bert_config.json`): at 128 every
/// row must match; at the default 256 every text of at most 128 pieces must.
#[test]
fn reproduces_sample_vectors() {
    const N: usize = 300;
    let texts = read_gz_lines(&sample("base_texts.txt.gz"), N).unwrap();
    assert_eq!(texts.len(), N);
    let (rows, dims, expected) = read_f16_npy(&sample("base.f16.npy"), N).unwrap();
    assert_eq!((rows, dims), (N, 384));
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();

    let e128 = Embedder::open(DEFAULT_MODEL)
        .unwrap()
        .with_max_tokens(128)
        .unwrap();
    let got = e128.embed(&refs).unwrap();
    assert_eq!(got.len(), N * dims);
    assert_unit_rows(&got, dims);
    let (min, mean) = cosine_stats(&got, &expected, dims);
    println!("max_tokens 128: cosine vs base.f16.npy over {N} texts: min {min:.6}, mean {mean:.6}");
    assert!(min >= 0.999, "min cosine {min} (mean {mean})");

    let e = embedder();
    let got = e.embed(&refs).unwrap();
    assert_unit_rows(&got, dims);
    let (min, mean) = cosine_stats(&got, &expected, dims);
    println!("max_tokens 256: cosine vs base.f16.npy over {N} texts: min {min:.6}, mean {mean:.6}");
    let mut short = 0;
    for (i, text) in refs.iter().enumerate() {
        if e.tokenize(text).unwrap().len() <= 128 {
            short += 1;
            let row = i * dims..(i + 1) * dims;
            let (cos, _) = cosine_stats(&got[row.clone()], &expected[row], dims);
            assert!(cos >= 0.999, "row {i}: cosine {cos}");
        }
    }
    println!("max_tokens 256: {short} of {N} texts have at most 128 word pieces; all match");
    assert!(short > N * 9 / 10);
}

/// Every precision against the file's own (`f32`) weights on the sample
/// texts: the vectors stay within cosine 0.999, and `f32` still matches the
/// dataset's vectors.
#[test]
fn reduced_precision_keeps_the_vectors() {
    const N: usize = 300;
    let texts = read_gz_lines(&sample("base_texts.txt.gz"), N).unwrap();
    let mut refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // Short texts like the queries of a search box, too.
    refs.extend([
        "mathematics based puzzle game",
        "ping",
        "2to3 binary using python3",
        "",
    ]);
    let dir = model_dir(DEFAULT_MODEL);
    let open = |p: Precision| {
        Embedder::open_dir_with(DEFAULT_MODEL, &dir, p)
            .unwrap()
            .with_max_tokens(128)
            .unwrap()
    };
    let exact = open(Precision::F32);
    assert_eq!(exact.precision(), Precision::F32);
    let want = exact.embed(&refs).unwrap();
    let dims = exact.dims();
    let (_, _, dataset) = read_f16_npy(&sample("base.f16.npy"), N).unwrap();
    let (min, _) = cosine_stats(&want[..N * dims], &dataset, dims);
    assert!(min >= 0.999, "f32 vs the dataset: min cosine {min}");
    for p in [Precision::F16, Precision::I8, Precision::Q8] {
        let got = open(p).embed(&refs).unwrap();
        assert_unit_rows(&got, dims);
        let (min, mean) = cosine_stats(&got, &want, dims);
        println!(
            "{} vs f32 over {} texts: min {min:.6}, mean {mean:.6}",
            p.name(),
            refs.len()
        );
        assert!(min >= 0.999, "{}: min cosine {min} (mean {mean})", p.name());
    }
    assert_eq!(embedder().precision(), DEFAULT_PRECISION);
}

#[test]
fn batching_and_threads_do_not_change_vectors() {
    let texts = read_gz_lines(&sample("base_texts.txt.gz"), 40).unwrap();
    let mut refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    refs.push("");
    let e = embedder();
    let dims = e.dims();
    let together = e.embed(&refs).unwrap();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    assert_eq!(one.install(|| e.embed(&refs)).unwrap(), together);
    let parallel = two.install(|| e.embed(&refs)).unwrap();
    for (i, text) in refs.iter().enumerate() {
        let alone = e.embed_one(text).unwrap();
        for got in [&together, &parallel] {
            let row = &got[i * dims..(i + 1) * dims];
            let diff = row
                .iter()
                .zip(&alone)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(diff < 1e-5, "text {i}: alone vs batched differ by {diff}");
        }
    }
    assert!(e.embed(&[]).unwrap().is_empty());
}

#[test]
fn empty_and_long_texts() {
    let e = embedder();
    let dims = e.dims();
    assert_eq!(e.tokenize("").unwrap(), vec![101, 102]);

    let long = "the quick brown fox jumps over the lazy dog ".repeat(200);
    let longer = format!("{long} and then some more words at the very end");
    assert_eq!(e.tokenize(&long).unwrap().len(), e.max_tokens());
    let v = e.embed(&["", &long, &longer, "  \t "]).unwrap();
    assert_eq!(v.len(), 4 * dims);
    assert_unit_rows(&v, dims);
    // Both long texts are cut at the same 256 word pieces.
    let (min, _) = cosine_stats(&v[dims..2 * dims], &v[2 * dims..3 * dims], dims);
    assert!(min > 0.99999, "{min}");
    // Whitespace only is [CLS] [SEP] too.
    let (min, _) = cosine_stats(&v[..dims], &v[3 * dims..], dims);
    assert!(min > 0.99999, "{min}");

    // The whole position table can be used, not more.
    let full = Embedder::open(DEFAULT_MODEL).unwrap();
    assert!(matches!(
        Embedder::open(DEFAULT_MODEL).unwrap().with_max_tokens(513),
        Err(EmbedError::Tokenize(_))
    ));
    let full = full.with_max_tokens(512).unwrap();
    assert_eq!(full.tokenize(&long).unwrap().len(), 512);
    assert_unit_rows(&full.embed(&[&long, ""]).unwrap(), dims);
}

#[test]
fn unknown_model_is_an_error() {
    let err = Embedder::open("no-such-model").unwrap_err();
    assert!(
        matches!(err, EmbedError::UnknownModel(ref n) if n == "no-such-model"),
        "{err}"
    );
}

#[test]
fn model_dir_honours_sagitta_models() {
    // Only read the variable: tests run in parallel and must not set it.
    let dir = model_dir(DEFAULT_MODEL);
    assert!(dir.ends_with(DEFAULT_MODEL));
    match std::env::var_os("SAGITTA_MODELS") {
        Some(root) if !root.is_empty() => assert_eq!(dir, Path::new(&root).join(DEFAULT_MODEL)),
        _ => assert!(dir.ends_with(Path::new(".cache/sagitta/models").join(DEFAULT_MODEL))),
    }
}

#[test]
fn missing_files_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let nowhere = tmp.path().join("nowhere");
    let err = Embedder::open_dir(DEFAULT_MODEL, &nowhere).unwrap_err();
    match &err {
        EmbedError::MissingFile { path, .. } => assert_eq!(path, &nowhere.join(WEIGHTS_FILE)),
        other => panic!("expected MissingFile, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(WEIGHTS_FILE), "{message}");
    assert!(message.contains("scripts/fetch-model"), "{message}");

    // Weights there, tokenizer missing.
    let real = model_dir(DEFAULT_MODEL).join(WEIGHTS_FILE);
    let dir = tmp.path().join("half");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&real, dir.join(WEIGHTS_FILE)).unwrap();
    let err = Embedder::open_dir(DEFAULT_MODEL, &dir).unwrap_err();
    assert!(
        matches!(&err, EmbedError::MissingFile { path, .. } if path.ends_with(TOKENIZER_FILE)),
        "{err:?}"
    );
    assert!(err.to_string().contains("scripts/fetch-model"));
}

/// A model directory with the real tokenizer and `weights` as the weights.
fn dir_with_weights(tmp: &Path, name: &str, weights: &[u8]) -> PathBuf {
    let dir = tmp.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join(WEIGHTS_FILE), weights).unwrap();
    std::fs::copy(
        model_dir(DEFAULT_MODEL).join(TOKENIZER_FILE),
        dir.join(TOKENIZER_FILE),
    )
    .unwrap();
    dir
}

#[test]
fn corrupt_files_are_errors_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let real = std::fs::read(model_dir(DEFAULT_MODEL).join(WEIGHTS_FILE)).unwrap();
    let mut flipped_header = real.clone();
    flipped_header[20] = b'#';
    let cases: [(&str, &[u8]); 5] = [
        ("truncated", &real[..real.len() / 2]),
        ("header-only", &real[..4096]),
        ("empty", &[]),
        ("garbage", b"this is not a safetensors file at all"),
        ("bad-header", &flipped_header),
    ];
    for (name, bytes) in cases {
        let dir = dir_with_weights(tmp.path(), name, bytes);
        let err = Embedder::open_dir(DEFAULT_MODEL, &dir).unwrap_err();
        match &err {
            EmbedError::Corrupt { path, .. } => assert_eq!(path, &dir.join(WEIGHTS_FILE), "{name}"),
            other => panic!("{name}: expected Corrupt, got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains(WEIGHTS_FILE) && message.contains("scripts/fetch-model"));
    }

    // A tokenizer that is not JSON.
    let dir = tmp.path().join("bad-tokenizer");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(
        model_dir(DEFAULT_MODEL).join(WEIGHTS_FILE),
        dir.join(WEIGHTS_FILE),
    )
    .unwrap();
    std::fs::write(dir.join(TOKENIZER_FILE), b"{\"version\": ").unwrap();
    let err = Embedder::open_dir(DEFAULT_MODEL, &dir).unwrap_err();
    assert!(
        matches!(&err, EmbedError::Corrupt { path, .. } if path.ends_with(TOKENIZER_FILE)),
        "{err:?}"
    );
}
