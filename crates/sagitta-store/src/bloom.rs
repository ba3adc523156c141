//! A scalable, blocked bloom filter over u64 keys: the collection's
//! constant-time "definitely absent" answer.
//!
//! A chain of filters: when the newest one holds its capacity, a new one
//! twice as large with half the false-positive rate is added, so the
//! overall rate stays under the target (`p/2 + p/4 + … < p`). Each filter
//! is blocked: all probe bits of a key lie in one 64-byte block, so a
//! lookup costs one cache miss per filter. Keys are never removed (a
//! deleted key stays "maybe present" until compaction rebuilds the filter).
//!
//! File layout (little-endian), see docs/FORMAT.md: magic `SGTABLM\0`,
//! version u32, filter count u32, target rate f64, initial capacity u64,
//! then per filter `blocks u64, k u32, 0u32, capacity u64, count u64`;
//! version 2 then has a chunk count u64, a CRC32C per 4 KiB of words, the
//! head's CRC32C and zeros to the next 4 KiB; then every filter's words,
//! then a CRC32C of all preceding bytes. The chunk checksums let a mapped
//! filter be trusted at once, each page checked when first read.

use crate::durable;
use crate::envelope::{self, BLOOM};
use crate::error::{io, Result, StoreError};
use crate::fault::{self, IoOp};
use crate::warm::Warmup;
use memmap2::{MmapMut, MmapOptions};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes before the filter table: the envelope's prefix, the filter
/// count u32, the target rate f64 and the initial capacity u64.
const HEADER_LEN: usize = 32;
/// Bytes of one filter's entry in the filter table.
const FILTER_ENTRY_LEN: usize = 32;
const BLOCK_WORDS: usize = 8;
/// Bytes of words one chunk checksum of a version-2 file covers: a page,
/// so a probe of a mapped filter checks just the page it reads.
const CHUNK: usize = 4096;
const CHUNK_WORDS: usize = CHUNK / 8;
const MAX_FILTERS: usize = 48;
/// Probes of a mapped filter after which its misses read ahead as usual:
/// a filter in steady use is warmed by large reads (see `warm.rs`).
const BLOOM_WARM_AFTER: u32 = 32;
/// Largest filter (2^34 blocks of 64 bytes, 1 TiB): a file claiming more
/// is corrupt, and a chain never grows past it.
const MAX_BLOCKS: u64 = 1 << 34;
/// Largest initial capacity a file may claim (collections size theirs at
/// most 2^20 keys, or four times their live rows).
const MAX_INITIAL: u64 = 1 << 36;

#[derive(Debug, Clone)]
struct Filter {
    /// First word of this filter in the bloom's word storage.
    offset: usize,
    blocks: u64,
    k: u32,
    capacity: u64,
    count: u64,
}

/// `n` zeroed words, backed by transparent huge pages where the kernel
/// offers them on request (`madvise` mode, the common default): a probe
/// of a filter of hundreds of megabytes is a TLB miss and a page walk on
/// 4 KiB pages besides its cache miss. The pages are advised before
/// their first touch (a large zeroed allocation is fresh mapped memory).
fn huge_zeroed(n: usize) -> Vec<u64> {
    let v = vec![0u64; n];
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = v.as_ptr() as usize;
        let end = start + n * 8;
        let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if to > from {
            // SAFETY: advice on whole pages inside `v`'s own allocation;
            // it changes how they are backed, never their contents.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
            }
        }
    }
    v
}

#[inline]
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Filter {
    fn new(capacity: u64, fp: f64, offset: usize) -> Filter {
        // Blocked filters lose a little accuracy; 20% more bits than the
        // classic optimum makes up for it at these rates.
        let bits = (-(capacity as f64) * fp.ln() / std::f64::consts::LN_2.powi(2) * 1.2).ceil();
        let blocks = ((bits / 512.0).ceil() as u64)
            .clamp(1, MAX_BLOCKS)
            .next_power_of_two();
        let per_key = (blocks * 512) as f64 / capacity.max(1) as f64;
        let k = ((per_key * std::f64::consts::LN_2).round() as u32).clamp(1, 7);
        Filter {
            offset,
            blocks,
            k,
            capacity,
            count: 0,
        }
    }

    fn words(&self) -> usize {
        self.blocks as usize * BLOCK_WORDS
    }

    #[inline]
    fn probe(&self, key: u64) -> (usize, u64) {
        let h = mix(key);
        let block = self.offset + (h & (self.blocks - 1)) as usize * BLOCK_WORDS;
        (block, mix(h ^ 0xA076_1D64_78BD_642F))
    }

    /// Whether all of a probe's bits are set in `block`.
    #[inline]
    fn has(&self, words: &[u64], block: usize, bits: u64) -> bool {
        (0..self.k).all(|j| {
            let b = (bits >> (j * 9)) & 511;
            words
                .get(block + (b / 64) as usize)
                .is_some_and(|w| w & (1 << (b % 64)) != 0)
        })
    }

    fn insert(&mut self, words: &mut [u64], key: u64) {
        let (block, bits) = self.probe(key);
        for j in 0..self.k {
            let b = (bits >> (j * 9)) & 511;
            if let Some(w) = words.get_mut(block + (b / 64) as usize) {
                *w |= 1 << (b % 64);
            }
        }
        self.count += 1;
    }
}

/// Where the filter words live: owned, or a private (copy-on-write)
/// mapping of the file, so opening costs nothing per key.
#[derive(Debug)]
enum Words {
    Owned(Vec<u64>),
    Mapped {
        map: MmapMut,
        /// Byte offset of the first word.
        start: usize,
        /// Number of words.
        len: usize,
        /// A version-2 file's chunk checksums; `None` for version 1
        /// (checked whole by a background thread).
        chunks: Option<Chunks>,
    },
}

/// The chunk checksums of a mapped version-2 filter.
#[derive(Debug)]
struct Chunks {
    /// Byte offset of the first chunk's CRC32C in the mapping.
    crcs: usize,
    /// Chunks whose words matched their checksum.
    checked: Box<[AtomicBool]>,
}

impl Words {
    /// Whether the words of the chunk holding word `at` may be used:
    /// owned words and version-1 maps always (those are checked whole),
    /// a version-2 chunk once its checksum matched, checked here on first
    /// use (one page, read anyway by the probe that asks).
    #[inline]
    fn chunk_ok(&self, at: usize) -> bool {
        let Words::Mapped {
            map,
            start,
            len,
            chunks: Some(c),
        } = self
        else {
            return true;
        };
        let i = at / CHUNK_WORDS;
        let Some(flag) = c.checked.get(i) else {
            return false;
        };
        if flag.load(Ordering::Acquire) {
            return true;
        }
        let from = start + i * CHUNK;
        let to = (start + len * 8).min(from + CHUNK);
        let want = map.get(c.crcs + 4 * i..c.crcs + 4 * i + 4);
        let ok = match (map.get(from..to), want) {
            (Some(words), Some(crc)) => crc32c::crc32c(words) == envelope::u32_at(crc, 0),
            _ => false,
        };
        if ok {
            flag.store(true, Ordering::Release);
        }
        ok
    }

    /// Gives mapped words the normal read-ahead again (see `warm.rs`).
    fn unrandom(&self) {
        #[cfg(unix)]
        if let Words::Mapped {
            map, start, len, ..
        } = self
        {
            let _ = map.advise_range(memmap2::Advice::Normal, *start, *len * 8);
        }
    }

    /// Checks every chunk not checked yet; false if one fails.
    fn check_all(&self) -> bool {
        let n = match self {
            Words::Mapped {
                len,
                chunks: Some(_),
                ..
            } => len.div_ceil(CHUNK_WORDS),
            _ => 0,
        };
        (0..n).all(|i| self.chunk_ok(i * CHUNK_WORDS))
    }

    fn slice(&self) -> &[u64] {
        match self {
            Words::Owned(v) => v,
            Words::Mapped {
                map, start, len, ..
            } => {
                let bytes = &map[*start..*start + len * 8];
                // SAFETY: the mapping is page aligned and `start` is a
                // multiple of 8 (checked at open), the range is inside the
                // mapping (checked at open), and every bit pattern is a
                // valid u64. The target is little-endian like the file.
                unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<u64>(), *len) }
            }
        }
    }

    fn slice_mut(&mut self) -> &mut [u64] {
        match self {
            Words::Owned(v) => v,
            Words::Mapped {
                map, start, len, ..
            } => {
                let bytes = &mut map[*start..*start + *len * 8];
                // SAFETY: as in `slice`; the mapping is private
                // (copy-on-write), so writes never reach the file, and
                // `&mut self` makes this the only reference.
                unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<u64>(), *len) }
            }
        }
    }
}

const PENDING: u8 = 0;
const GOOD: u8 = 1;
const BAD: u8 = 2;

/// The scalable bloom filter.
///
/// A filter opened from a file is memory-mapped. A version-2 file is
/// trusted at once: each 4 KiB of words is checked against its checksum
/// when first read. A version-1 file is trusted once a background thread
/// has checked the whole file's CRC. Until then, and for ever once a
/// check fails, every key reads as "maybe present", which is always a
/// correct answer.
#[derive(Debug)]
pub struct Bloom {
    filters: Vec<Filter>,
    words: Words,
    fp: f64,
    initial: u64,
    check: Arc<AtomicU8>,
    checker: Mutex<Option<JoinHandle<()>>>,
    /// Probes of mapped words (advised random at open, normal once in
    /// use).
    warm: Warmup,
}

impl Drop for Bloom {
    /// Joins the background check of an opened file, so no thread of ours
    /// outlives the filter (the check reads one small file).
    fn drop(&mut self) {
        if let Some(h) = self.checker.get_mut().take() {
            let _ = h.join();
        }
    }
}

impl Bloom {
    /// An empty filter for about `initial` keys before it first grows, with
    /// an overall false-positive rate under `fp`.
    pub fn new(initial: u64, fp: f64) -> Bloom {
        let fp = fp.clamp(1e-9, 0.5);
        let initial = initial.max(1024);
        let f = Filter::new(initial, fp / 2.0, 0);
        Bloom {
            words: Words::Owned(huge_zeroed(f.words())),
            filters: vec![f],
            fp,
            initial,
            check: Arc::new(AtomicU8::new(GOOD)),
            checker: Mutex::new(None),
            warm: Warmup::new(BLOOM_WARM_AFTER),
        }
    }

    /// Whether the filter's answers are trusted (always, except for a
    /// file still being checked or one that failed its check).
    pub fn trusted(&self) -> bool {
        self.check.load(Ordering::Acquire) == GOOD
    }

    /// Finishes the check of an opened file (waits for a version-1
    /// file's background check, checks a version-2 file's unread chunks);
    /// returns whether the filter is trusted.
    pub fn wait_checked(&self) -> bool {
        if let Some(h) = self.checker.lock().take() {
            let _ = h.join();
        }
        if self.check.load(Ordering::Acquire) == PENDING || !self.words.check_all() {
            self.check.store(BAD, Ordering::Release);
        }
        self.trusted()
    }

    /// Whether `key` may have been inserted (false means certainly not).
    #[inline]
    pub fn may_contain(&self, key: u64) -> bool {
        if !self.trusted() {
            return true;
        }
        if self.warm.note() {
            self.words.unrandom();
        }
        self.contains_bits(key)
    }

    /// Hints the CPU to fetch the blocks [`Bloom::may_contain`] of `key`
    /// reads, so a batch tested after all its keys are hinted waits for
    /// memory once, not per key.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if !self.trusted() {
            return;
        }
        let words = self.words.slice();
        for f in &self.filters {
            let (block, _) = f.probe(key);
            if let Some(w) = words.get(block..) {
                sagitta_index::prefetch(w.as_ptr().cast());
            }
        }
    }

    /// Whether any filter has all of `key`'s bits; a
    /// chunk failing its check makes the whole filter untrusted (and
    /// answers maybe).
    #[inline]
    fn contains_bits(&self, key: u64) -> bool {
        let words = self.words.slice();
        self.filters.iter().any(|f| {
            let (block, bits) = f.probe(key);
            if !self.words.chunk_ok(block) {
                self.check.store(BAD, Ordering::Release);
                return true;
            }
            f.has(words, block, bits)
        })
    }

    /// Records `keys`, distinct from each other, into a new filter built
    /// for them (its newest filter has room for all, in memory): their
    /// blocks are fetched a stretch ahead of their bits being set, so the
    /// cache misses of a filter larger than cache overlap (a segment's
    /// key filter, built from its key index). Otherwise one at a time.
    pub fn insert_distinct(&mut self, keys: impl ExactSizeIterator<Item = u64> + Clone) {
        let room = self
            .filters
            .last()
            .is_some_and(|f| f.count + keys.len() as u64 <= f.capacity);
        if !room || !matches!(self.words, Words::Owned(_)) || self.filters.len() != 1 {
            keys.for_each(|k| self.insert(k));
            return;
        }
        const AHEAD: usize = 16;
        let f = &mut self.filters[0];
        let words = self.words.slice_mut();
        let mut ahead = keys.clone().skip(AHEAD);
        for k in keys.clone().take(AHEAD) {
            sagitta_index::prefetch(words[f.probe(k).0..].as_ptr().cast());
        }
        for k in keys {
            if let Some(a) = ahead.next() {
                sagitta_index::prefetch(words[f.probe(a).0..].as_ptr().cast());
            }
            f.insert(words, k);
        }
    }

    /// Records each of `keys`, their blocks fetched a stretch ahead of
    /// their bits being tested and set (one miss per key in a filter
    /// larger than cache is what a batch of a million keys waited on).
    pub fn insert_many(&mut self, keys: &[u64]) {
        const AHEAD: usize = 16;
        for &k in keys.iter().take(AHEAD) {
            self.prefetch(k);
        }
        for (i, &k) in keys.iter().enumerate() {
            if let Some(&a) = keys.get(i + AHEAD) {
                self.prefetch(a);
            }
            self.insert(k);
        }
    }

    /// Records `key`.
    pub fn insert(&mut self, key: u64) {
        if self.contains_bits(key) {
            return;
        }
        let n = self.filters.len();
        let full = self.filters.last().is_none_or(|f| f.count >= f.capacity);
        if full && n < MAX_FILTERS {
            // The words are copied out of the mapping: check them first.
            if !self.wait_checked() {
                return;
            }
            let cap = self.initial << n.min(40);
            let fp = self.fp / 2f64.powi(n as i32 + 1);
            let old = self.words.slice();
            let f = Filter::new(cap, fp, old.len());
            let mut words = huge_zeroed(old.len() + f.words());
            words[..old.len()].copy_from_slice(old);
            self.words = Words::Owned(words);
            self.filters.push(f);
        }
        if let Some(f) = self.filters.last_mut() {
            // A chunk is checked before its first change (after it, its
            // checksum no longer matches).
            if !self.words.chunk_ok(f.probe(key).0) {
                self.check.store(BAD, Ordering::Release);
                return;
            }
            f.insert(self.words.slice_mut(), key);
        }
    }

    /// Keys recorded (distinct, up to false positives at insert).
    pub fn count(&self) -> u64 {
        self.filters.iter().map(|f| f.count).sum()
    }

    /// Filters in the chain.
    pub fn filters(&self) -> usize {
        self.filters.len()
    }

    /// Fraction of the newest filter's capacity in use (0..=1).
    pub fn fill(&self) -> f64 {
        self.filters
            .last()
            .map_or(0.0, |f| f.count as f64 / f.capacity.max(1) as f64)
    }

    /// Bytes of filter bits held in memory.
    pub fn memory_bytes(&self) -> usize {
        self.words.slice().len() * 8
    }

    /// Serialises to the file layout described in the module docs (the
    /// newest version). A mapped filter must be checked first
    /// ([`Bloom::wait_checked`]): its words are written as they are.
    pub fn to_bytes(&self) -> Vec<u8> {
        let words = word_bytes(self.words.slice());
        let mut b = self.head(&words);
        b.extend_from_slice(&words);
        envelope::seal(&mut b);
        b
    }

    /// Writes the file durably (a temporary file written and fsynced,
    /// renamed into place, the directory fsynced) from the words where
    /// they are: no second copy of them is made (537 MB at 100M keys).
    pub(crate) fn write_durably(&self, path: &Path) -> Result<()> {
        let words = word_bytes(self.words.slice());
        let head = self.head(&words);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head), &words);
        let tmp = durable::tmp_path(path);
        let written = (|| {
            let mut f = fault::create(&tmp)?;
            fault::write_all(&mut f, &head, &tmp)?;
            fault::write_all(&mut f, &words, &tmp)?;
            fault::write_all(&mut f, &crc.to_le_bytes(), &tmp)?;
            fault::sync_all(&f, &tmp)
        })();
        durable::publish(written, &tmp, path)
    }

    /// An owned copy of the filter behind `lock`, read a few megabytes
    /// at a time with the lock let go between them, so writes inserting
    /// keys wait for a chunk, not for the copy of the whole filter (at
    /// 100M keys, half a second per bloom file written). Every key
    /// inserted before the call is in the copy (bits are only ever set);
    /// keys inserted during it may be in part, which only adds false
    /// positives. A filter replaced or grown meanwhile is copied again.
    pub(crate) fn copy_chunked(lock: &parking_lot::RwLock<Bloom>) -> Bloom {
        const STEP: usize = 1 << 19; // words: 4 MiB
        'again: loop {
            let (mut copy, len) = {
                let b = lock.read();
                let len = b.words.slice().len();
                let copy = Bloom {
                    filters: b.filters.clone(),
                    words: Words::Owned(huge_zeroed(len)),
                    fp: b.fp,
                    initial: b.initial,
                    check: Arc::new(AtomicU8::new(b.check.load(Ordering::Acquire))),
                    checker: Mutex::new(None),
                    warm: Warmup::new(BLOOM_WARM_AFTER),
                };
                (copy, len)
            };
            let mut at = 0;
            while at < len {
                let end = (at + STEP).min(len);
                let b = lock.read();
                let from = b.words.slice();
                if from.len() != len || b.filters.len() != copy.filters.len() {
                    continue 'again;
                }
                copy.words.slice_mut()[at..end].copy_from_slice(&from[at..end]);
                at = end;
            }
            return copy;
        }
    }

    /// Every byte of the file before the words (`words`: their bytes).
    fn head(&self, words: &[u8]) -> Vec<u8> {
        let chunks = words.len().div_ceil(CHUNK);
        let len = HEADER_LEN + self.filters.len() * FILTER_ENTRY_LEN + 8 + chunks * 4 + 12;
        let mut b = Vec::with_capacity(len.next_multiple_of(CHUNK));
        BLOOM.begin(&mut b);
        b.extend_from_slice(&(self.filters.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.fp.to_le_bytes());
        b.extend_from_slice(&self.initial.to_le_bytes());
        debug_assert_eq!(b.len(), HEADER_LEN);
        for f in &self.filters {
            b.extend_from_slice(&f.blocks.to_le_bytes());
            b.extend_from_slice(&f.k.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&f.capacity.to_le_bytes());
            b.extend_from_slice(&f.count.to_le_bytes());
        }
        b.extend_from_slice(&(chunks as u64).to_le_bytes());
        for c in words.chunks(CHUNK) {
            b.extend_from_slice(&crc32c::crc32c(c).to_le_bytes());
        }
        b.resize(b.len().next_multiple_of(8), 0);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.resize(b.len().next_multiple_of(CHUNK), 0);
        b
    }

    /// Parses everything of a serialised filter but its words and the
    /// whole-file CRC: header, filter table and (version 2) the chunk
    /// table, whose own checksum is checked. Every inconsistency is
    /// `Corrupt`.
    fn parse_header(b: &[u8], path: &Path) -> Result<Layout> {
        let bad = |offset: usize, reason: &str| StoreError::Corrupt {
            file: path.to_path_buf(),
            offset: offset as u64,
            reason: reason.to_string(),
        };
        let version = BLOOM.version(path, b)?;
        if b.len() < HEADER_LEN + envelope::TRAILER_LEN {
            return Err(bad(0, "shorter than the bloom filter header"));
        }
        let u32_at = |o: usize| envelope::u32_at(b, o);
        let u64_at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        let n = u32_at(12) as usize;
        let fp = f64::from_bits(u64_at(16));
        let initial = u64_at(24);
        if n == 0 || n > MAX_FILTERS || !(fp > 0.0 && fp < 1.0) {
            return Err(bad(12, "bad filter count or rate"));
        }
        if !(1..=MAX_INITIAL).contains(&initial) {
            return Err(bad(24, "bad initial capacity"));
        }
        let body = b.len() - envelope::TRAILER_LEN;
        let mut at = HEADER_LEN;
        let mut filters = Vec::with_capacity(n);
        let mut offset = 0usize;
        for _ in 0..n {
            if at + FILTER_ENTRY_LEN > body {
                return Err(bad(at, "truncated filter table"));
            }
            let blocks = u64_at(at);
            let k = u32_at(at + 8);
            if !blocks.is_power_of_two() || blocks > MAX_BLOCKS || !(1..=7).contains(&k) {
                return Err(bad(at, "bad filter geometry"));
            }
            let f = Filter {
                offset,
                blocks,
                k,
                capacity: u64_at(at + 16),
                count: u64_at(at + 24),
            };
            // Filter i is the one the chain grows to (`Bloom::insert`):
            // its capacity and geometry follow from the initial capacity
            // and rate, so a file cannot claim a capacity its words do not
            // back (the next filter, twice the last, would be sized by it).
            let i = filters.len();
            let want = Filter::new(initial << i.min(40), fp / 2f64.powi(i as i32 + 1), offset);
            if (f.capacity, f.blocks, f.k) != (want.capacity, want.blocks, want.k) {
                return Err(bad(at, "filter geometry does not follow the chain's"));
            }
            offset += f.words();
            filters.push(f);
            at += FILTER_ENTRY_LEN;
        }
        let mut crcs = None;
        let words_at = if version == 1 {
            at
        } else {
            if at + 8 > body {
                return Err(bad(at, "truncated chunk table"));
            }
            if u64_at(at) != offset.div_ceil(CHUNK_WORDS) as u64 {
                return Err(bad(at, "chunk count does not match the filters"));
            }
            let end = at + 8 + (offset.div_ceil(CHUNK_WORDS) * 4).next_multiple_of(8);
            if end + 8 > body {
                return Err(bad(at, "truncated chunk table"));
            }
            if crc32c::crc32c(&b[..end]) != u32_at(end) {
                return Err(bad(end, "header checksum mismatch"));
            }
            crcs = Some(at + 8);
            (end + 8).next_multiple_of(CHUNK)
        };
        if words_at + offset * 8 != body {
            return Err(bad(at, "file size does not match the filter table"));
        }
        Ok(Layout {
            filters,
            fp,
            initial,
            words_at,
            crcs,
        })
    }

    /// Parses a serialised filter, checking its CRC.
    pub fn from_bytes(b: &[u8], path: &Path) -> Result<Bloom> {
        let l = Bloom::parse_header(b, path)?;
        let body = envelope::unseal(path, b)?;
        let words = body[l.words_at..]
            .chunks_exact(8)
            .map(|c| {
                let mut x = [0u8; 8];
                x.copy_from_slice(c);
                u64::from_le_bytes(x)
            })
            .collect();
        Ok(Bloom {
            filters: l.filters,
            words: Words::Owned(words),
            fp: l.fp,
            initial: l.initial,
            check: Arc::new(AtomicU8::new(GOOD)),
            checker: Mutex::new(None),
            warm: Warmup::new(BLOOM_WARM_AFTER),
        })
    }

    /// Opens a filter file without reading its words: they are mapped
    /// privately (copy-on-write), so the cost is the same for any number
    /// of keys. A version-2 file is trusted at once (each chunk checked
    /// when first read); a version-1 file's CRC is checked by a
    /// background thread, and until that passes the filter answers
    /// "maybe" for every key.
    pub fn open(path: &Path) -> Result<Bloom> {
        let file = fault::open(path)?;
        fault::check(IoOp::Mmap, path).map_err(io("mmap", path))?;
        // SAFETY: bloom files are written once (tmp, fsync, rename) and
        // never modified in place; the mapping is private, so our own
        // inserts never reach the file. All reads are bounds checked
        // against the length validated below.
        let map = unsafe { MmapOptions::new().map_copy(&file) }.map_err(io("mmap", path))?;
        let l = Bloom::parse_header(&map, path)?;
        let start = l.words_at;
        if !start.is_multiple_of(8) {
            return Err(StoreError::Corrupt {
                file: path.to_path_buf(),
                offset: start as u64,
                reason: "misaligned words".into(),
            });
        }
        let len: usize = l.filters.iter().map(Filter::words).sum();
        let (check, checker, chunks) = match l.crcs {
            Some(crcs) => {
                // A probe reads one block per filter and one chunk
                // checksum: no read-ahead (the head included).
                #[cfg(unix)]
                let _ = map.advise(memmap2::Advice::Random);
                let checked = (0..len.div_ceil(CHUNK_WORDS))
                    .map(|_| AtomicBool::new(false))
                    .collect();
                let chunks = Chunks { crcs, checked };
                (Arc::new(AtomicU8::new(GOOD)), None, Some(chunks))
            }
            None => {
                let check = Arc::new(AtomicU8::new(PENDING));
                let flag = check.clone();
                let owned = path.to_path_buf();
                let checker = std::thread::Builder::new()
                    .name("sagitta-bloom-check".into())
                    .spawn(move || {
                        let ok = std::fs::read(&owned)
                            .is_ok_and(|b| envelope::unseal(&owned, &b).is_ok());
                        flag.store(if ok { GOOD } else { BAD }, Ordering::Release);
                    })
                    .ok();
                if checker.is_none() {
                    check.store(BAD, Ordering::Release);
                }
                (check, checker, None)
            }
        };
        Ok(Bloom {
            filters: l.filters,
            words: Words::Mapped {
                map,
                start,
                len,
                chunks,
            },
            fp: l.fp,
            initial: l.initial,
            check,
            checker: Mutex::new(checker),
            warm: Warmup::new(BLOOM_WARM_AFTER),
        })
    }

    /// Reads and checks a filter file completely.
    pub fn read(path: &Path) -> Result<Bloom> {
        let b = fault::read(path).map_err(io("read", path))?;
        Bloom::from_bytes(&b, path)
    }
}

/// Filter words as the file's bytes (little-endian): the words
/// themselves on a little-endian target.
fn word_bytes(words: &[u64]) -> std::borrow::Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: a u64 is 8 initialised bytes with no padding, u8 has
        // alignment 1, and the length covers exactly the same memory.
        std::borrow::Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8)
        })
    }
    #[cfg(not(target_endian = "little"))]
    {
        std::borrow::Cow::Owned(words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }
}

/// What [`Bloom::parse_header`] found.
struct Layout {
    filters: Vec<Filter>,
    fp: f64,
    initial: u64,
    /// Byte offset of the first word.
    words_at: usize,
    /// Version 2: byte offset of the chunk checksums.
    crcs: Option<usize>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn no_false_negatives_and_rate_under_target() {
        let mut b = Bloom::new(1024, 0.01);
        for k in 0..100_000u64 {
            b.insert(k * 7919);
        }
        assert!(b.filters() > 1, "the chain grew");
        assert!((0..100_000u64).all(|k| b.may_contain(k * 7919)));
        let fp = (0..200_000u64)
            .filter(|k| b.may_contain(k * 7919 + 1))
            .count() as f64
            / 200_000.0;
        assert!(fp < 0.01, "false-positive rate {fp}");
    }

    #[test]
    fn distinct_keys_set_the_bits_one_by_one_inserts_set() {
        let keys: Vec<u64> = (0..300_000u64)
            .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let (mut one, mut all) = (Bloom::new(300_000, 0.01), Bloom::new(300_000, 0.01));
        keys.iter().for_each(|&k| one.insert(k));
        let t = std::time::Instant::now();
        all.insert_distinct(keys.iter().copied());
        eprintln!("300k distinct keys: {:?}", t.elapsed());
        assert_eq!(one.words.slice(), all.words.slice());
        assert_eq!(all.count(), 300_000);
        assert!(keys.iter().all(|&k| all.may_contain(k)));
        // Past the room of the newest filter: one at a time, the chain grows.
        let mut small = Bloom::new(1024, 0.01);
        small.insert_distinct(keys.iter().copied());
        assert!(small.filters() > 1);
        assert!(keys.iter().all(|&k| small.may_contain(k)));
    }

    #[test]
    fn a_chunked_copy_holds_every_key_inserted_before_it_while_inserts_go_on() {
        // Over 4 MiB of words: copied in several chunks.
        let mut b = Bloom::new(4_000_000, 0.01);
        let before: Vec<u64> = (0..1_000_000u64).map(|k| k * 31).collect();
        b.insert_many(&before);
        let lock = parking_lot::RwLock::new(b);
        let copy = std::thread::scope(|s| {
            s.spawn(|| {
                for k in 1_000_000..2_000_000u64 {
                    lock.write().insert(k * 31);
                }
            });
            Bloom::copy_chunked(&lock)
        });
        assert!(copy.memory_bytes() > 4 << 20);
        assert!(before.iter().all(|&k| copy.may_contain(k)));
        assert_eq!(copy.filters(), 1);
    }

    #[test]
    fn round_trip_and_corruption() {
        let mut b = Bloom::new(2048, 0.01);
        for k in 0..10_000u64 {
            b.insert(k);
        }
        let bytes = b.to_bytes();
        // Written to a file from the words where they are: the same bytes.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bloom.bin");
        let lock = parking_lot::RwLock::new(b);
        Bloom::copy_chunked(&lock).write_durably(&path).unwrap();
        let b = lock.into_inner();
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let p = Path::new("bloom");
        let back = Bloom::from_bytes(&bytes, p).unwrap();
        assert!((0..10_000u64).all(|k| back.may_contain(k)));
        assert_eq!(back.count(), b.count());
        for cut in [0, 10, 40, bytes.len() - 1] {
            assert!(Bloom::from_bytes(&bytes[..cut], p).is_err());
        }
        let mut flipped = bytes.clone();
        flipped[100] ^= 1;
        assert!(matches!(
            Bloom::from_bytes(&flipped, p),
            Err(StoreError::Corrupt { .. })
        ));
    }

    /// Found by the `bloom` fuzz target: a file claiming an initial
    /// capacity near 2^64 parsed, and the first insert that grew the chain
    /// sized a filter past memory (capacity overflow). Such a file is
    /// corrupt now, and a chain never sizes a filter past `MAX_BLOCKS`.
    #[test]
    fn huge_capacities_are_refused_not_allocated() {
        let p = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/fuzz/bloom-huge-initial-capacity.bin"
        ));
        // The trailer replaced with a matching one, as the fuzz target does.
        let reseal = |b: &mut Vec<u8>| {
            b.truncate(b.len() - envelope::TRAILER_LEN);
            envelope::seal(b);
        };
        let mut fuzzed = std::fs::read(p).unwrap();
        reseal(&mut fuzzed);
        assert!(matches!(
            Bloom::from_bytes(&fuzzed, p),
            Err(StoreError::Corrupt { offset: 24, .. })
        ));
        // A filter claiming a capacity its words do not back (full, so the
        // next insert would grow the chain by twice that) is refused too.
        let mut b = Bloom::new(1024, 0.01).to_bytes();
        b[48..56].copy_from_slice(&(1u64 << 40).to_le_bytes()); // capacity
        b[56..64].copy_from_slice(&(1u64 << 40).to_le_bytes()); // count
        reseal(&mut b);
        assert!(matches!(
            Bloom::from_bytes(&b, p),
            Err(StoreError::Corrupt { offset: 32, .. })
        ));
    }

    #[test]
    fn mapped_open_is_trusted_at_once_and_checks_each_page_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = Bloom::new(200_000, 0.01);
        for k in 0..50_000u64 {
            b.insert(k);
        }
        let bytes = b.to_bytes();
        assert_eq!(envelope::u32_at(&bytes, 8), 2);
        let path = dir.path().join("bloom.bin");
        std::fs::write(&path, &bytes).unwrap();
        let mut m = Bloom::open(&path).unwrap();
        assert!(m.trusted(), "no wait for a check of the whole file");
        assert!((0..50_000u64).all(|k| m.may_contain(k)));
        let misses = (50_000..150_000u64).filter(|&k| m.may_contain(k)).count();
        assert!(misses < 1000, "{misses}");
        m.insert(1_000_000); // copy-on-write: the file is unchanged
        assert!(m.may_contain(1_000_000));
        assert!(m.wait_checked());
        assert_eq!(std::fs::read(&path).unwrap(), bytes);

        // One bit of one page of words flipped (the whole-file CRC left
        // stale: a mapped open never reads it).
        let words_at = bytes.len() - envelope::TRAILER_LEN - b.memory_bytes();
        assert!(words_at.is_multiple_of(CHUNK));
        let page = 3;
        let mut bad = bytes.clone();
        bad[words_at + page * CHUNK + 100] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let m = Bloom::open(&path).unwrap();
        assert!(m.trusted());
        let f = &m.filters[0];
        let (clean, hit): (Vec<u64>, Vec<u64>) =
            (0..50_000u64).partition(|&k| f.probe(k).0 / CHUNK_WORDS != page);
        assert!(clean.iter().all(|&k| m.may_contain(k)));
        assert!(m.trusted(), "pages that were not changed pass");
        assert!(m.may_contain(hit[0]));
        assert!(!m.trusted(), "the changed page fails its check");
        assert!(
            m.may_contain(123_456_789_000),
            "an untrusted filter answers maybe"
        );
        assert!(!m.wait_checked());
        // A damaged chunk table is refused at open.
        let mut bad = bytes.clone();
        bad[HEADER_LEN + FILTER_ENTRY_LEN + 8] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert!(matches!(
            Bloom::open(&path),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
