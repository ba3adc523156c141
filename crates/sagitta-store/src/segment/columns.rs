//! A segment's payload columns and full-text index, read in place from
//! the map: the payload sections checked (CRC32C, IPC bounds) and decoded
//! on first use, the Arrow buffers pointing into the map; the text
//! section parsed on each use (O(fields)).

use super::format::{corrupt, SectionKind};
use super::Segment;
use crate::error::Result;
use crate::filter::SegmentPayload;
use crate::payload::Schema;
use crate::pindex;
use memmap2::Mmap;
use sagitta_text::TextSection;
use std::sync::Arc;

impl Segment {
    /// The full-text index of the segment's text fields (None when it was
    /// written without one). Parsed from the mapping on each call: the
    /// header and one directory entry per field.
    pub fn text(&self) -> Result<Option<TextSection<'_>>> {
        let Some((off, len)) = self.text else {
            return Ok(None);
        };
        TextSection::parse(&self.map[off..off + len], self.info.slots as u32)
            .map(Some)
            .map_err(|e| corrupt(&self.path, off as u64, e.to_string()))
    }

    /// The payload columns and indexes, decoded on first use (the Arrow
    /// buffers point into the map: nothing is copied). `None` when the
    /// segment was written without payload.
    pub fn payload(&self) -> Result<Option<Arc<SegmentPayload>>> {
        let r = self.payload.get_or_init(|| {
            let Some(((po, pl), (io_, il))) = self.payload_sections else {
                return Ok(None);
            };
            // Checked once, on first use (not at open): a damaged payload
            // is a typed error before any of it is parsed.
            for s in self.sections.iter().filter(|s| {
                s.kind == SectionKind::Payload as u32 || s.kind == SectionKind::PayloadIndex as u32
            }) {
                let bytes = self.bytes((s.offset as usize, s.len as usize));
                if crc32c::crc32c(bytes) != s.crc {
                    return Err(format!("section {} fails its checksum", s.kind));
                }
            }
            crate::ipc::check_stream(self.bytes((po, pl)), false)
                .map_err(|e| format!("payload section: {e}"))?;
            let whole = self.map_buffer();
            let mut ipc = whole.slice_with_length(po, pl);
            let mut dec = arrow_ipc::reader::StreamDecoder::new();
            let mut batch = None;
            // ipc::check_stream bounds every buffer, and the decoder
            // validates array data; a panic inside Arrow on bytes that
            // slipped through both is still turned into an error.
            let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                while !ipc.is_empty() && batch.is_none() {
                    batch = dec.decode(&mut ipc)?;
                }
                Ok::<_, arrow_schema::ArrowError>(())
            }));
            match decoded {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("payload section: {e}")),
                Err(_) => return Err("payload section: malformed Arrow data".into()),
            }
            let batch = batch.ok_or("payload section: no record batch")?;
            if batch.num_rows() != self.info.slots as usize {
                return Err(format!(
                    "payload section has {} rows for {} slots",
                    batch.num_rows(),
                    self.info.slots
                ));
            }
            let schema = Schema::from_arrow(batch.schema().as_ref()).map_err(|e| e.to_string())?;
            let index = pindex::PayloadIndex::open(whole.slice_with_length(io_, il), schema.len())?;
            Ok(Some(Arc::new(SegmentPayload::new(schema, batch, index))))
        });
        r.clone().map_err(|reason| {
            corrupt(
                &self.path,
                self.payload_sections.map_or(0, |p| p.0 .0 as u64),
                reason,
            )
        })
    }

    /// The whole map as an Arrow buffer that keeps the map alive.
    fn map_buffer(&self) -> arrow_buffer::Buffer {
        let owner: Arc<Mmap> = self.map.clone();
        let ptr = std::ptr::NonNull::new(owner.as_ptr() as *mut u8)
            .unwrap_or(std::ptr::NonNull::dangling());
        // SAFETY: the pointer and length describe the live, read-only
        // mapping owned by `owner`, which the buffer keeps alive; Arrow
        // never writes through an immutable `Buffer`.
        unsafe { arrow_buffer::Buffer::from_custom_allocation(ptr, owner.len(), owner) }
    }
}
