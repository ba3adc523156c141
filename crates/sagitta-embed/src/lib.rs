//! Sagitta's built-in text embedding: the sentence-transformers model
//! [all-MiniLM-L6-v2] run in Rust.
//!
//! The model files (`model.safetensors`, `tokenizer.json`) are not in the
//! repository: `scripts/fetch-model` puts them under [`model_dir`]. The
//! BERT encoder is written here (module `bert`): its dense products run on
//! weights packed at open by `sagitta-kernels` ([`Precision`]: by default
//! 8-bit weights multiplied in integers, within cosine 0.999 of the file's
//! `f32` model), GELU and LayerNorm on its `nn` module, everything else is
//! plain loops; the weights are read with the `safetensors` crate and
//! the word pieces come from the `tokenizers` crate reading
//! `tokenizer.json`. [`Embedder::embed`] reproduces
//! `SentenceTransformer.encode(texts, normalize_embeddings=True)`:
//! truncation at 256 word pieces (counting `[CLS]` and `[SEP]`), mean
//! pooling over the attention mask, L2 normalisation.
//!
//! # Threads
//!
//! [`Embedder::embed`] runs on the rayon pool it is called from: the
//! global pool (sized by `RAYON_NUM_THREADS`, else one thread per CPU), or
//! the pool whose [`rayon::ThreadPool::install`] encloses the call. It
//! tokenizes on that pool, splits the texts into length-sorted batches and
//! keeps `rayon::current_num_threads()` workers each embedding whole
//! batches, each batch on one thread. So
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let embedder = sagitta_embed::Embedder::open(sagitta_embed::DEFAULT_MODEL)?;
//! let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
//! let vectors = pool.install(|| embedder.embed(&["one thread"]))?;
//! # Ok(()) }
//! ```
//!
//! uses exactly one thread. A single text is embedded on the calling
//! thread, without the pool. [`Embedder::open`] packs the model's layers on
//! the pool it is called from, the same way. Nothing else spawns threads.
//!
//! [all-MiniLM-L6-v2]: https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;
use tokenizers::Tokenizer;

mod bert;

use bert::{Bert, Config};
use sagitta_kernels::matmul::WeightType;

/// How the encoder's dense weights are stored, and in what its products
/// are summed (`f32`, except for [`Precision::Q8`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// The file's values: 90 MB read per query, which a one-text query
    /// waits on (memory bandwidth, not arithmetic, bounds it).
    F32,
    /// Half precision: 45 MB; vectors within cosine 0.99999 of `F32`'s.
    F16,
    /// 8-bit weights with one scale per output column, except the second
    /// feed-forward product of each layer, kept in `F16`: 14 MB, which
    /// stays in a server CPU's last-level cache between queries. Measured
    /// on 2,000 debian-pkg-retrieval queries and 1,000 debian-minilm texts
    /// (`examples/query_latency.rs`): worst cosine to `F32`'s vectors
    /// 0.9994, mean 0.9998; with that product in 8 bits too, worst 0.998
    /// (its inputs, GELU outputs, carry the widest range).
    I8,
    /// 8-bit weights in every product, with one scale per output column
    /// and group of 64 inputs, and the products in integers: each
    /// product's activations rounded per row to 16 bits, the sums in 32-bit
    /// integers (`sagitta_kernels::qmatmul`: twice the multiply-adds per
    /// instruction of `f32`'s). 11 MB. The groups keep the second
    /// feed-forward product, which one scale per column rounds too coarsely
    /// (see `I8`), within the bound. Measured as `I8` was: worst cosine to
    /// `F32`'s vectors 0.99957 on the queries, 0.99960 on the texts (means
    /// 0.99986 and 0.99984), and 1.4x `I8`'s speed for a one-text query.
    Q8,
}

impl Precision {
    /// Short lowercase name (`f32`, `f16`, `i8`, `q8`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::I8 => "i8",
            Precision::Q8 => "q8",
        }
    }

    /// Storage of the attention projections and the first feed-forward
    /// product.
    pub(crate) fn attention(self) -> WeightType {
        match self {
            Precision::F32 => WeightType::F32,
            Precision::F16 => WeightType::F16,
            Precision::I8 => WeightType::I8,
            Precision::Q8 => WeightType::Q8Grouped,
        }
    }

    /// Storage of the second feed-forward product.
    pub(crate) fn feed_forward_out(self) -> WeightType {
        match self {
            Precision::F32 => WeightType::F32,
            Precision::F16 | Precision::I8 => WeightType::F16,
            Precision::Q8 => WeightType::Q8Grouped,
        }
    }
}

/// The precision [`Embedder::open`] uses: [`Precision::Q8`], the fastest
/// one-text query whose vectors stay within cosine 0.999 of the file's
/// model (the test `reduced_precision_keeps_the_vectors`).
pub const DEFAULT_PRECISION: Precision = Precision::Q8;

/// The model [`Embedder::open`] knows: sentence-transformers'
/// all-MiniLM-L6-v2 (384 dimensions, cosine).
pub const DEFAULT_MODEL: &str = "all-minilm-l6-v2";

/// Weights file inside a model directory.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Tokenizer file inside a model directory.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Padded word pieces per batch (texts × longest text). Measured on the
/// debian-minilm texts (29 pieces on average) on one thread: 512 gave
/// about 98 texts per CPU-second, 1024 about 90, 4096 about 77 (the
/// activations of a small batch stay in the caches), 256 about 85.
const BATCH_TOKENS: usize = 512;
const BATCH_TEXTS: usize = 64;

/// The directory holding the files of model `name`:
/// `$SAGITTA_MODELS/<name>` when `SAGITTA_MODELS` is set (and not empty),
/// else `~/.cache/sagitta/models/<name>` (`$HOME`; the current directory if
/// `HOME` is unset).
pub fn model_dir(name: &str) -> PathBuf {
    let root = match std::env::var_os("SAGITTA_MODELS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache").join("sagitta").join("models")
        }
    };
    root.join(name)
}

/// The dimensions of the embeddings model `name` gives, known without
/// loading it (384 for [`DEFAULT_MODEL`]); [`EmbedError::UnknownModel`]
/// for a model this crate does not know.
pub fn dims_of(name: &str) -> Result<usize, EmbedError> {
    match name {
        DEFAULT_MODEL => Ok(Config::MINILM_L6.hidden),
        _ => Err(EmbedError::UnknownModel(name.to_string())),
    }
}

/// Why a model could not be opened or a text not embedded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The model name is not one this crate knows.
    #[error("unknown embedding model {0:?} (known: {DEFAULT_MODEL:?})")]
    UnknownModel(String),
    /// A model file is not there.
    #[error("embedding model file {} is missing: {hint}", path.display())]
    MissingFile {
        /// The file looked for.
        path: PathBuf,
        /// What to do about it (run `scripts/fetch-model`).
        hint: String,
    },
    /// A model file is there but unreadable, truncated or not the expected model.
    #[error("embedding model file {} is corrupt ({reason}); delete it and run `scripts/fetch-model`", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The tokenizer refused a text.
    #[error("tokenizing failed: {0}")]
    Tokenize(String),
    /// The tensor computation failed.
    #[error("embedding computation failed: {0}")]
    Compute(String),
}

/// A loaded sentence embedding model. Cheap to share: `embed` takes `&self`
/// and may run on many threads at once.
pub struct Embedder {
    name: String,
    dir: PathBuf,
    tokenizer: Tokenizer,
    max_tokens: usize,
    precision: Precision,
    model: Bert,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("dims", &self.dims())
            .field("max_tokens", &self.max_tokens())
            .field("precision", &self.precision)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// Opens the named model from [`model_dir`]`(name)`. Only
    /// [`DEFAULT_MODEL`] is known.
    pub fn open(name: &str) -> Result<Embedder, EmbedError> {
        if name != DEFAULT_MODEL {
            return Err(EmbedError::UnknownModel(name.to_string()));
        }
        Self::open_dir(name, &model_dir(name))
    }

    /// Opens model `name` (only [`DEFAULT_MODEL`]'s architecture is known)
    /// from `dir`, which holds `model.safetensors` and `tokenizer.json`,
    /// with the dense weights stored at [`DEFAULT_PRECISION`].
    pub fn open_dir(name: &str, dir: &Path) -> Result<Embedder, EmbedError> {
        Self::open_dir_with(name, dir, DEFAULT_PRECISION)
    }

    /// [`open_dir`](Self::open_dir) with the dense weights stored at
    /// `precision`.
    pub fn open_dir_with(
        name: &str,
        dir: &Path,
        precision: Precision,
    ) -> Result<Embedder, EmbedError> {
        if name != DEFAULT_MODEL {
            return Err(EmbedError::UnknownModel(name.to_string()));
        }
        let config = Config::MINILM_L6;
        let weights_path = dir.join(WEIGHTS_FILE);
        let tokenizer_path = dir.join(TOKENIZER_FILE);
        for path in [&weights_path, &tokenizer_path] {
            if !path.is_file() {
                return Err(missing(path));
            }
        }

        let tokenizer = load_tokenizer(&tokenizer_path, config.max_tokens)?;
        let file = std::fs::File::open(&weights_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => missing(&weights_path),
            _ => corrupt(&weights_path, e),
        })?;
        // SAFETY: the mapping is read only while `Bert::load` copies the
        // weights out, and dropped before this returns. A file truncated
        // meanwhile by another process could fault the read (SIGBUS), as
        // with any mapped file; the model directory is ours
        // (`scripts/fetch-model`), not a user's upload.
        let weights =
            unsafe { memmap2::Mmap::map(&file) }.map_err(|e| corrupt(&weights_path, e))?;
        let model =
            Bert::load(&weights, config, precision).map_err(|e| corrupt(&weights_path, e))?;
        Ok(Embedder {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            tokenizer,
            max_tokens: config.max_tokens,
            precision,
            model,
        })
    }

    /// The model's name, as given to [`Embedder::open`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory the model was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How the dense weights are stored.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Dimensions of an embedding (384).
    pub fn dims(&self) -> usize {
        self.model.config().hidden
    }

    /// Word pieces a text is truncated to, `[CLS]` and `[SEP]` included
    /// (256, as sentence-transformers does for this model).
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Sets the truncation length in word pieces, `[CLS]` and `[SEP]`
    /// included: 2 to 512 (the model's position table); the default is
    /// 256, sentence-transformers' `max_seq_length` for this model.
    pub fn with_max_tokens(mut self, max_tokens: usize) -> Result<Embedder, EmbedError> {
        let limit = self.model.config().max_positions;
        if !(2..=limit).contains(&max_tokens) {
            return Err(EmbedError::Tokenize(format!(
                "max_tokens {max_tokens} outside 2..={limit}"
            )));
        }
        set_truncation(&mut self.tokenizer, max_tokens)
            .map_err(|e| EmbedError::Tokenize(e.to_string()))?;
        self.max_tokens = max_tokens;
        Ok(self)
    }

    /// Embeds `texts`: mean pooling of the last hidden states over the
    /// attention mask, then L2 normalisation, as sentence-transformers does
    /// for all-MiniLM-L6-v2. Returns `texts.len() × dims()` floats, row
    /// major, rows in the order of `texts`; every row has unit length. Texts
    /// longer than [`max_tokens`](Self::max_tokens) word pieces are
    /// truncated; an empty text is embedded as `[CLS] [SEP]`.
    ///
    /// Texts are tokenized, sorted by length and embedded in batches of
    /// similar lengths, on the current rayon pool (see the crate docs).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<f32>, EmbedError> {
        let dims = self.dims();
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        if let [text] = texts {
            // One text (a query): one batch, on the calling thread, with
            // no hand-off to the pool and no worker woken to find nothing.
            let ids = self.tokenize(text)?;
            return self
                .model
                .embed_batch(&[ids.as_slice()])
                .map_err(EmbedError::Compute);
        }
        let ids = texts
            .par_iter()
            .with_min_len(64)
            .map(|text| self.tokenize(text))
            .collect::<Result<Vec<_>, _>>()?;

        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let batches = plan_batches(&order, &ids);

        let mut out = vec![0f32; texts.len() * dims];
        let workers = rayon::current_num_threads().clamp(1, batches.len());
        let next = AtomicUsize::new(0);
        let done = (0..workers)
            .into_par_iter()
            .map(|_| {
                let mut done = Vec::new();
                loop {
                    let b = next.fetch_add(1, Ordering::Relaxed);
                    let Some(batch) = batches.get(b) else {
                        break;
                    };
                    let rows: Vec<&[u32]> = batch.iter().map(|&i| ids[i].as_slice()).collect();
                    let vectors = self.model.embed_batch(&rows).map_err(EmbedError::Compute)?;
                    done.push((b, vectors));
                }
                Ok(done)
            })
            .collect::<Result<Vec<_>, EmbedError>>()?;
        for (b, vectors) in done.into_iter().flatten() {
            for (row, &text) in vectors.chunks_exact(dims).zip(&batches[b]) {
                out[text * dims..(text + 1) * dims].copy_from_slice(row);
            }
        }
        Ok(out)
    }

    /// Embeds one text: [`embed`](Self::embed) of a single text.
    pub fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed(&[text])
    }

    /// The word-piece ids of `text` as the model sees them: `[CLS]`, the
    /// pieces, `[SEP]`, truncated to [`max_tokens`](Self::max_tokens).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let encoding = self
            .tokenizer
            .encode_fast(text, true)
            .map_err(|e| EmbedError::Tokenize(e.to_string()))?;
        let vocab = self.model.config().vocab;
        let ids = encoding.get_ids();
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(EmbedError::Tokenize(format!(
                "token id {bad} outside the model's vocabulary of {vocab}"
            )));
        }
        Ok(ids.to_vec())
    }
}

/// Groups text indexes (sorted by length) into batches of at most
/// [`BATCH_TEXTS`] texts and [`BATCH_TOKENS`] padded word pieces.
fn plan_batches(order: &[usize], ids: &[Vec<u32>]) -> Vec<Vec<usize>> {
    let mut batches = Vec::new();
    let mut batch: Vec<usize> = Vec::new();
    for &i in order {
        let len = ids[i].len();
        if !batch.is_empty()
            && (batch.len() >= BATCH_TEXTS || (batch.len() + 1) * len > BATCH_TOKENS)
        {
            batches.push(std::mem::take(&mut batch));
        }
        batch.push(i);
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

fn load_tokenizer(path: &Path, max_tokens: usize) -> Result<Tokenizer, EmbedError> {
    let mut tokenizer = Tokenizer::from_file(path).map_err(|e| corrupt(path, e))?;
    // tokenizer.json pads to 128 and truncates at 128; sentence-transformers
    // overrides both (no padding, truncation at max_seq_length = 256).
    tokenizer.with_padding(None);
    set_truncation(&mut tokenizer, max_tokens).map_err(|e| corrupt(path, e))?;
    Ok(tokenizer)
}

fn set_truncation(tokenizer: &mut Tokenizer, max_tokens: usize) -> tokenizers::Result<()> {
    tokenizer.with_truncation(Some(tokenizers::TruncationParams {
        max_length: max_tokens,
        ..Default::default()
    }))?;
    Ok(())
}

fn missing(path: &Path) -> EmbedError {
    EmbedError::MissingFile {
        path: path.to_path_buf(),
        hint: format!(
            "run `scripts/fetch-model` to download all-MiniLM-L6-v2 into {} \
             (set SAGITTA_MODELS to choose another directory)",
            path.parent().unwrap_or(path).display()
        ),
    }
}

fn corrupt(path: &Path, reason: impl std::fmt::Display) -> EmbedError {
    EmbedError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}
