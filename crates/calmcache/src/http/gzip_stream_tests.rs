#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame};

use super::{GzipBody, PIECE};
use crate::http::body::BoxError;

/// What the test origin does at each poll.
enum Step {
    Data(Bytes),
    /// Nothing ready this time (the waker is woken at once).
    Wait,
    Trailers(HeaderMap),
    Fail,
}

/// A body that plays `steps`, then ends.
struct Scripted(VecDeque<Step>);

impl Body for Scripted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.0.pop_front() {
            None => Poll::Ready(None),
            Some(Step::Data(d)) => Poll::Ready(Some(Ok(Frame::data(d)))),
            Some(Step::Trailers(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Some(Step::Fail) => Poll::Ready(Some(Err("origin broke off".into()))),
            Some(Step::Wait) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

/// What one poll of the encoder gave.
#[derive(Debug)]
enum Got {
    Data(Bytes),
    Pending,
    Trailers(HeaderMap),
    Error,
    End,
}

fn poll(body: &mut GzipBody<Scripted>) -> Got {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(body).poll_frame(&mut cx) {
        Poll::Pending => Got::Pending,
        Poll::Ready(None) => Got::End,
        Poll::Ready(Some(Err(_))) => Got::Error,
        Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
            Ok(d) => Got::Data(d),
            Err(frame) => Got::Trailers(frame.into_trailers().unwrap()),
        },
    }
}

/// Polls to the end (bounded), collecting the data and the trailers.
fn drain(body: &mut GzipBody<Scripted>) -> (Vec<u8>, Option<HeaderMap>) {
    let (mut out, mut trailers) = (Vec::new(), None);
    for _ in 0..100_000 {
        match poll(body) {
            Got::Data(d) => out.extend_from_slice(&d),
            Got::Pending => {}
            Got::Trailers(t) => trailers = Some(t),
            Got::Error => panic!("unexpected error"),
            Got::End => return (out, trailers),
        }
    }
    panic!("the body never ended");
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    decoder.write_all(bytes).unwrap();
    decoder.finish().unwrap()
}

/// Text that compresses like a page does (repeats, but not only).
fn page(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(format!("<li class=\"item\">row {i} of the list</li>\n").as_bytes());
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407)
            % 100_000;
    }
    out.truncate(len);
    out
}

#[test]
fn decodes_to_the_origin_bytes_across_frames_large_and_small() {
    let body = page(3 * PIECE + 1234);
    let steps = VecDeque::from([
        Step::Data(Bytes::copy_from_slice(&body[..10])),
        Step::Wait,
        // One frame larger than PIECE: compressed in pieces.
        Step::Data(Bytes::copy_from_slice(&body[10..2 * PIECE + 7])),
        Step::Data(Bytes::copy_from_slice(&body[2 * PIECE + 7..])),
    ]);
    let mut gz = GzipBody::new(Scripted(steps));
    let (out, trailers) = drain(&mut gz);
    assert!(trailers.is_none());
    assert!(
        out.len() < body.len() / 2,
        "{} of {}",
        out.len(),
        body.len()
    );
    assert_eq!(gunzip(&out), body);
    assert!(gz.is_end_stream());
}

#[test]
fn an_empty_body_is_an_empty_gzip_stream() {
    let mut gz = GzipBody::new(Scripted(VecDeque::new()));
    let (out, _) = drain(&mut gz);
    assert_eq!(gunzip(&out), b"");
}

/// A slow origin (or server-sent events): what arrived before the origin
/// went quiet reaches the client at once, decodable, not at the body's end.
#[test]
fn what_arrived_is_flushed_when_the_origin_waits() {
    let event = b"data: first event\n\n".to_vec();
    // The origin goes quiet for two polls: the first flushes, the second waits.
    let steps = VecDeque::from([
        Step::Data(Bytes::from(event.clone())),
        Step::Wait,
        Step::Wait,
    ]);
    let mut gz = GzipBody::new(Scripted(steps));
    let mut sent = Vec::new();
    loop {
        match poll(&mut gz) {
            Got::Data(d) => sent.extend_from_slice(&d),
            Got::Pending => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    // A streaming decoder gets the whole event from what was sent so far.
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    decoder.write_all(&sent).unwrap();
    decoder.flush().unwrap();
    assert_eq!(decoder.get_ref(), &event);
}

/// Work per poll is bounded: a frame of several pieces is never
/// compressed in one poll.
#[test]
fn one_poll_compresses_at_most_one_piece() {
    let body = page(8 * PIECE);
    let steps = VecDeque::from([Step::Data(Bytes::from(body))]);
    let mut gz = GzipBody::new(Scripted(steps));
    let mut polls = 0;
    while !matches!(poll(&mut gz), Got::End) {
        polls += 1;
        assert!(polls < 10_000);
    }
    assert!(polls >= 8, "{polls} polls for 8 pieces");
}

#[test]
fn trailers_follow_the_gzip_stream() {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let steps = VecDeque::from([
        Step::Data(Bytes::from_static(b"hello hello hello")),
        Step::Trailers(trailers.clone()),
    ]);
    let mut gz = GzipBody::new(Scripted(steps));
    let (out, got) = drain(&mut gz);
    assert_eq!(gunzip(&out), b"hello hello hello");
    assert_eq!(got, Some(trailers));
}

#[test]
fn an_origin_error_is_passed_on() {
    let steps = VecDeque::from([Step::Data(Bytes::from_static(b"partial")), Step::Fail]);
    let mut gz = GzipBody::new(Scripted(steps));
    let mut failed = false;
    for _ in 0..10 {
        if matches!(poll(&mut gz), Got::Error) {
            failed = true;
            break;
        }
    }
    assert!(failed);
}

/// Not a test of speed (no timing assertion): prints what compressing one
/// PIECE costs at LEVEL, the figure PIECE's doc relies on. Run with
/// `cargo test -p calmcache --lib gzip_stream -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_piece_cost() {
    let body = page(64 * PIECE);
    let start = std::time::Instant::now();
    let steps = VecDeque::from([Step::Data(Bytes::from(body.clone()))]);
    let (out, _) = drain(&mut GzipBody::new(Scripted(steps)));
    let elapsed = start.elapsed();
    println!(
        "{} pieces of {PIECE} B in {elapsed:?}: {:?} per piece, ratio {:.2}",
        64,
        elapsed / 64,
        out.len() as f64 / body.len() as f64
    );
}
