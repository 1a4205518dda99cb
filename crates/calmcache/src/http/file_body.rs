//! Streaming a large disk object's body (or `len` bytes of any open file:
//! [`open_file_body`], a file route's answer): chunks read with positioned reads
//! on the blocking thread pool, a few chunks ahead of the client at most, so
//! memory per response stays bounded whatever the object's size and no
//! blocking-pool thread waits on a slow client.

use bytes::Bytes;
use calmcache_core::LazyBody;
use tokio::sync::mpsc;

use crate::http::body::{BoxError, ChannelBody, ResponseBody};

/// Bytes read per blocking call.
pub(crate) const CHUNK: usize = 256 * 1024;
/// Chunks read ahead of the client.
const AHEAD: usize = 4;

/// Streams `len` bytes of `lazy`'s body from `start`. With `verify` (the
/// whole body), the body's CRC is checked at the end: a mismatch ends the
/// response with an error (the client sees a cut connection, never wrong
/// bytes presented as complete) and removes the file.
pub(crate) fn file_body(lazy: &LazyBody, start: u64, len: u64, verify: bool) -> ResponseBody {
    let (tx, rx) = mpsc::channel::<Result<Bytes, BoxError>>(AHEAD);
    let lazy = lazy.clone();
    tokio::spawn(async move {
        let mut crc = crc32fast::Hasher::new();
        let mut at = start;
        let end = start.saturating_add(len);
        // With `verify`, the last chunk is held back until the checksum is
        // known: a corrupt body then ends in an error, never as complete.
        let mut held: Option<Bytes> = None;
        while at < end {
            let n = usize::try_from((end - at).min(CHUNK as u64)).unwrap_or(CHUNK);
            let reader = lazy.clone();
            let read = tokio::task::spawn_blocking(move || reader.read_at(at, n)).await;
            let chunk = match joined(read) {
                Ok(chunk) => chunk,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            at += n as u64;
            if verify {
                crc.update(&chunk);
            }
            let ready = if verify {
                held.replace(chunk)
            } else {
                Some(chunk)
            };
            if let Some(ready) = ready {
                if tx.send(Ok(ready)).await.is_err() {
                    return; // The client went away.
                }
            }
        }
        if verify && crc.finalize() != lazy.crc {
            tracing::warn!(file = %lazy.path.display(), "cache file body checksum mismatch; removed");
            let path = lazy.path.clone();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(path)).await;
            let _ = tx
                .send(Err("cache file body checksum mismatch".into()))
                .await;
            return;
        }
        if let Some(last) = held {
            let _ = tx.send(Ok(last)).await;
        }
    });
    ResponseBody::stream(ChannelBody::new(rx, len))
}

/// Streams `len` bytes of `file` from `start`, as [`file_body`] does (a
/// few chunks ahead of the client, each read on the blocking pool). A read
/// short of `len` (the file shrank) ends the body with an error: the
/// client sees a cut connection, never a short body passed off as whole.
pub(crate) fn open_file_body(
    file: std::sync::Arc<std::fs::File>,
    start: u64,
    len: u64,
) -> ResponseBody {
    use std::os::unix::fs::FileExt;
    let (tx, rx) = mpsc::channel::<Result<Bytes, BoxError>>(AHEAD);
    tokio::spawn(async move {
        let end = start.saturating_add(len);
        let mut at = start;
        while at < end {
            let n = usize::try_from((end - at).min(CHUNK as u64)).unwrap_or(CHUNK);
            let reader = file.clone();
            let read = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; n];
                reader
                    .read_exact_at(&mut buf, at)
                    .map(|()| Bytes::from(buf))
            })
            .await;
            let chunk = match joined(read) {
                Ok(chunk) => chunk,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            at += n as u64;
            if tx.send(Ok(chunk)).await.is_err() {
                return; // The client went away.
            }
        }
    });
    ResponseBody::stream(ChannelBody::new(rx, len))
}

/// A blocking read's chunk, or its error (the read's, or the blocking
/// task's when it panicked or was cancelled), as the body sends it.
fn joined<E: Into<BoxError>>(
    read: Result<Result<Bytes, E>, tokio::task::JoinError>,
) -> Result<Bytes, BoxError> {
    match read {
        Ok(Ok(chunk)) => Ok(chunk),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(e.into()),
    }
}
