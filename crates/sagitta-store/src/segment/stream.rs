//! Streams a segment's sections into its file: each section padded to its
//! 64-byte alignment, its offset, length and CRC32C recorded for the
//! section table, payload batches encoded as Arrow IPC straight into the
//! file, and the disk's writeback started every few megabytes so the
//! final fsync has little left.

use super::format::{Section, SectionKind, SECTION_ALIGN};
use crate::error::{io, Result, StoreError};
use crate::fault;
use crate::payload;
use arrow_array::RecordBatch;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Streams sections into a file, tracking offset and CRC of each.
pub(super) struct SectionWriter<'a> {
    out: BufWriter<File>,
    pos: u64,
    /// Bytes before this offset have been handed to the disk.
    synced: u64,
    path: &'a Path,
    sections: Vec<Section>,
    cur: Option<(u32, u64, u32)>,
}

/// A [`SectionWriter`] as `io::Write` for Arrow's IPC writer, keeping the
/// first error of the file.
struct IpcSink<'s, 'p> {
    w: &'s mut SectionWriter<'p>,
    err: Option<StoreError>,
}

impl std::io::Write for IpcSink<'_, '_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self.w.put(b) {
            Ok(()) => Ok(b.len()),
            Err(e) => {
                let msg = e.to_string();
                self.err.get_or_insert(e);
                Err(std::io::Error::other(msg))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Start the disk's writeback every this many bytes while a segment is
/// written (RocksDB's `bytes_per_sync`), so the final fsync has little
/// left and the journal commit it forces does not stall the WAL's fsyncs
/// of concurrent writers behind tens of megabytes of dirty pages.
const WRITEBACK_EVERY: u64 = 4 << 20;

impl<'a> SectionWriter<'a> {
    /// A writer at the start of `out`, the file at `path`.
    pub(super) fn new(out: BufWriter<File>, path: &'a Path) -> SectionWriter<'a> {
        SectionWriter {
            out,
            pos: 0,
            synced: 0,
            path,
            sections: vec![],
            cur: None,
        }
    }

    /// Bytes written so far.
    pub(super) fn pos(&self) -> u64 {
        self.pos
    }

    /// The sections written, in order.
    pub(super) fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// The file, every buffered byte handed to it.
    pub(super) fn into_file(self) -> Result<File> {
        self.out.into_inner().map_err(|e| StoreError::Io {
            op: "flush",
            path: self.path.to_path_buf(),
            source: e.into_error(),
        })
    }

    pub(super) fn raw(&mut self, b: &[u8]) -> Result<()> {
        fault::write_all(&mut self.out, b, self.path)?;
        self.pos += b.len() as u64;
        if self.pos - self.synced >= WRITEBACK_EVERY {
            self.start_writeback()?;
        }
        Ok(())
    }

    /// Asks the kernel to start writing the bytes written since the last
    /// call, after waiting for the previous range to reach the disk: at
    /// most one chunk is in flight, so a background segment write paces
    /// itself to the disk instead of queueing tens of megabytes that a
    /// concurrent WAL fsync would wait behind. The fsync at the end still
    /// makes the file durable.
    fn start_writeback(&mut self) -> Result<()> {
        self.out.flush().map_err(io("write", self.path))?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let fd = self.out.get_ref().as_raw_fd();
            // SAFETY: sync_file_range on an open descriptor we own, over
            // byte ranges of the file; it touches no memory of ours.
            unsafe {
                if self.synced > 0 {
                    libc::sync_file_range(
                        fd,
                        0,
                        self.synced as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WAIT_BEFORE
                            | libc::SYNC_FILE_RANGE_WRITE
                            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                    );
                }
                libc::sync_file_range(
                    fd,
                    self.synced as libc::off64_t,
                    (self.pos - self.synced) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        self.synced = self.pos;
        Ok(())
    }

    pub(super) fn begin(&mut self, kind: SectionKind) -> Result<()> {
        let pad = self.pos.next_multiple_of(SECTION_ALIGN) - self.pos;
        self.raw(&vec![0u8; pad as usize])?;
        self.cur = Some((kind as u32, self.pos, 0));
        Ok(())
    }

    pub(super) fn put(&mut self, b: &[u8]) -> Result<()> {
        if let Some((_, _, crc)) = self.cur.as_mut() {
            *crc = crc32c::crc32c_append(*crc, b);
        }
        self.raw(b)
    }

    /// The Arrow IPC stream of `batch`, written as it is encoded.
    pub(super) fn put_ipc(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut sink = IpcSink { w: self, err: None };
        let r = payload::write_ipc(batch, &mut sink);
        match (sink.err, r) {
            // The file's own error (a full disk, an injected fault), not
            // the message Arrow wrapped it in.
            (Some(e), _) => Err(e),
            (None, r) => r.map_err(StoreError::Payload),
        }
    }

    pub(super) fn end(&mut self) {
        if let Some((kind, offset, crc)) = self.cur.take() {
            self.sections.push(Section {
                kind,
                offset,
                len: self.pos - offset,
                crc,
            });
        }
    }
}

#[cfg(all(test, feature = "failpoints"))]
mod payload_write_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::fault::IoOp;
    use crate::payload::{Field, FieldType, Schema, Value};

    fn batch(rows: usize) -> RecordBatch {
        let schema = Schema::new(vec![Field {
            name: "text".into(),
            ty: FieldType::String,
        }])
        .unwrap();
        let rows: Vec<Vec<Value>> = (0..rows)
            .map(|i| vec![Value::Str(format!("row {i} {}", "x".repeat(i % 50)))])
            .collect();
        payload::to_record_batch(&schema, rows.iter().map(|r| Some(&r[..]))).unwrap()
    }

    fn writer(path: &Path) -> SectionWriter<'_> {
        SectionWriter {
            // A small buffer: every put reaches the file layer.
            out: BufWriter::with_capacity(64, fault::create(path).unwrap()),
            pos: 0,
            synced: 0,
            path,
            sections: vec![],
            cur: None,
        }
    }

    #[test]
    fn the_payload_section_is_the_ipc_stream_with_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("payload.bin");
        let b = batch(2_000);
        let mut w = writer(&path);
        w.begin(SectionKind::Payload).unwrap();
        w.put_ipc(&b).unwrap();
        w.end();
        w.out.flush().unwrap();
        let written = std::fs::read(&path).unwrap();
        let expected = payload::ipc_bytes(&b).unwrap();
        assert_eq!(written, expected);
        assert_eq!(w.sections.len(), 1);
        assert_eq!(w.sections[0].len, expected.len() as u64);
        assert_eq!(w.sections[0].crc, crc32c::crc32c(&expected));
    }

    #[test]
    fn a_disk_failing_inside_the_payload_returns_the_file_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("payload.bin");
        let b = batch(2_000);
        let mut w = writer(&path);
        w.begin(SectionKind::Payload).unwrap();
        // Some of the stream lands, then the disk is full.
        fault::armed::inject(
            fault::armed::Fault::new(IoOp::Write, dir.path(), libc::ENOSPC).after(3),
        );
        let e = w.put_ipc(&b).unwrap_err();
        let fired = fault::armed::clear(dir.path());
        assert!(fired >= 1, "the fault fired");
        match e {
            StoreError::Io { op, source, .. } => {
                assert_eq!(op, "write");
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
            }
            other => panic!("expected the file's error, got {other:?}"),
        }
    }
}
