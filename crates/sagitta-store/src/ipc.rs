//! Bounds of Arrow IPC bytes checked before Arrow reads them. Arrow's
//! readers trust a message's buffer offsets and lengths and panic on ones
//! past the body (found by fuzzing), so every IPC input, a segment's
//! payload section as much as a client's upload or Flight message, is
//! checked here first: each message's metadata is a verified flatbuffer,
//! its body lies inside the bytes, and every buffer of a record or
//! dictionary batch inside its body.

use arrow_ipc::Message;

/// Checks one IPC message: `meta` its flatbuffer metadata, `body_len` the
/// bytes of body that come with it. `client`: input from a client, which
/// may hold dictionary batches (Sagitta never writes them, so a segment's
/// payload section with one is refused).
pub fn check_message(meta: &[u8], body_len: usize, client: bool) -> Result<(), String> {
    let msg = arrow_ipc::root_as_message(meta).map_err(|e| format!("bad message ({e})"))?;
    let body = usize::try_from(msg.bodyLength()).map_err(|_| "negative body length".to_string())?;
    if body > body_len {
        return Err(format!("body of {body} bytes past the {body_len} given"));
    }
    check_buffers(&msg, body, client)
}

fn check_buffers(msg: &Message<'_>, body: usize, client: bool) -> Result<(), String> {
    let batch = match (
        msg.header_as_record_batch(),
        msg.header_as_dictionary_batch(),
    ) {
        (Some(rb), _) => Some(rb),
        (None, Some(d)) if client => d.data(),
        (None, Some(_)) => return Err("unexpected dictionary batch".into()),
        (None, None) => None,
    };
    if let Some(rb) = batch {
        for buf in rb.buffers().iter().flatten() {
            let ok = usize::try_from(buf.offset())
                .ok()
                .zip(usize::try_from(buf.length()).ok())
                .and_then(|(o, l)| o.checked_add(l))
                .is_some_and(|e| e <= body);
            if !ok {
                return Err("buffer outside its message body".into());
            }
        }
    }
    Ok(())
}

/// Checks a whole IPC stream (continuation marker, length, metadata,
/// body; message after message up to the end marker or the end of `b`).
/// `client` as for [`check_message`]; besides, a segment's section must
/// hold no compressed batch (Sagitta writes none), while a client's is
/// left to Arrow, which reads it or refuses it with an error.
pub fn check_stream(b: &[u8], client: bool) -> Result<(), String> {
    let bad = |what: &str, at: usize| format!("{what} at byte {at}");
    let mut at = 0usize;
    while at < b.len() {
        let word = |o: usize| {
            b.get(o..o + 4)
                .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        };
        if word(at) != Some(u32::MAX) {
            return Err(bad("missing message marker", at));
        }
        let mlen = word(at + 4).ok_or_else(|| bad("truncated message", at))? as usize;
        if mlen == 0 {
            return Ok(()); // end of stream
        }
        let meta_start = at + 8;
        let meta = meta_start
            .checked_add(mlen)
            .and_then(|e| b.get(meta_start..e))
            .ok_or_else(|| bad("message past the end", at))?;
        let msg =
            arrow_ipc::root_as_message(meta).map_err(|e| bad(&format!("bad message ({e})"), at))?;
        let body = usize::try_from(msg.bodyLength()).map_err(|_| bad("negative body", at))?;
        let body_start = meta_start + mlen;
        let body_end = body_start
            .checked_add(body)
            .filter(|&e| e <= b.len())
            .ok_or_else(|| bad("body past the end", at))?;
        if !client
            && msg
                .header_as_record_batch()
                .is_some_and(|rb| rb.compression().is_some())
        {
            return Err(bad("unexpected compression", at));
        }
        check_buffers(&msg, body, client).map_err(|e| bad(&e, at))?;
        at = body_end;
    }
    Ok(())
}
