use super::*;

/// One frame: header (length, type, flags, stream) and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A client's opening: the preface and an empty SETTINGS.
fn opening() -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out
}

fn link(v: &'static str) -> HeaderValue {
    HeaderValue::from_static(v)
}

#[test]
fn integers_follow_rfc_7541_appendix_c1() {
    let mut out = Vec::new();
    hpack_int(&mut out, 0, 5, 10);
    assert_eq!(out, [0x0a]);
    out.clear();
    hpack_int(&mut out, 0, 5, 1337);
    assert_eq!(out, [0x1f, 0x9a, 0x0a]);
    out.clear();
    hpack_int(&mut out, 0, 4, 45);
    assert_eq!(out, [0x0f, 0x1e]);
    out.clear();
    hpack_int(&mut out, 0, 7, 127);
    assert_eq!(out, [0x7f, 0x00]);
}

#[test]
fn the_h2_hint_is_one_headers_frame_of_literals_without_indexing() {
    let frame = h2_hint(3, &[link("</s.css>; rel=preload; as=style")]).unwrap();
    let value = b"</s.css>; rel=preload; as=style";
    let mut block = vec![0x08, 0x03, b'1', b'0', b'3', 0x0f, 0x1e, value.len() as u8];
    block.extend_from_slice(value);
    assert_eq!(&frame[..3], &[0, 0, block.len() as u8]);
    assert_eq!(frame[3], HEADERS);
    // END_HEADERS, not END_STREAM (0x1).
    assert_eq!(frame[4], END_HEADERS);
    assert_eq!(&frame[5..9], &[0, 0, 0, 3]);
    assert_eq!(&frame[9..], &block[..]);
}

#[test]
fn a_long_value_takes_a_multi_byte_length_and_a_too_big_block_none() {
    let long = HeaderValue::from_str(&format!("</{}>; rel=preload", "a".repeat(300))).unwrap();
    let frame = h2_hint(1, std::slice::from_ref(&long)).unwrap();
    // 316 bytes: 0x7f, then 316 - 127 = 189 as 0xbd 0x01.
    assert_eq!(&frame[9 + 7..9 + 10], &[0x7f, 0xbd, 0x01]);
    let huge = HeaderValue::from_str(&format!("</{}>", "a".repeat(MAX_FRAME))).unwrap();
    assert!(h2_hint(1, &[huge]).is_none());
}

#[test]
fn the_h1_hint_is_a_status_line_and_link_lines() {
    let bytes = h1_hint(&[
        link("</a.css>; rel=preload"),
        link("<https://x>; rel=preconnect"),
    ]);
    assert_eq!(
        bytes,
        b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\
          link: <https://x>; rel=preconnect\r\n\r\n"
    );
}

/// Feeds `bytes` to `f` in pieces of `step` bytes.
fn fed(f: &mut Frames, bytes: &[u8], step: usize, inbound: bool) {
    for piece in bytes.chunks(step) {
        if inbound {
            f.inbound(piece);
        } else {
            f.outbound(piece);
        }
    }
}

#[test]
fn one_waiting_stream_is_found_whatever_the_read_sizes() {
    for step in 1..40 {
        let mut f = Frames::default();
        let mut client = opening();
        client.extend(frame(HEADERS, END_HEADERS | 0x1, 1, &[0x82, 0x84]));
        fed(&mut f, &client, step, true);
        assert_eq!(f.only_waiting(), Some(1), "step {step}");
        // The server's SETTINGS, then its answer on stream 1.
        let mut server = frame(SETTINGS, 0, 0, &[]);
        server.extend(frame(HEADERS, END_HEADERS, 1, &[0x88]));
        fed(&mut f, &server, step, false);
        assert_eq!(f.only_waiting(), None, "step {step}");
        assert!(f.at_boundary());
    }
}

#[test]
fn two_waiting_streams_get_no_hint_and_a_reset_closes_one() {
    let mut f = Frames::default();
    let mut client = opening();
    client.extend(frame(HEADERS, END_HEADERS, 1, &[0x82]));
    client.extend(frame(HEADERS, END_HEADERS, 3, &[0x82]));
    f.inbound(&client);
    assert_eq!(f.only_waiting(), None);
    f.inbound(&frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    assert_eq!(f.only_waiting(), Some(3));
    // A trailer section on stream 3 opens nothing.
    f.inbound(&frame(HEADERS, END_HEADERS | 0x1, 3, &[0x82]));
    assert_eq!(f.only_waiting(), Some(3));
    // The server resetting it closes it too.
    f.outbound(&frame(RST_STREAM, 0, 3, &[0, 0, 0, 7]));
    assert_eq!(f.only_waiting(), None);
}

#[test]
fn no_boundary_mid_frame_or_between_headers_and_continuation() {
    let mut f = Frames::default();
    f.inbound(&opening());
    let data = frame(0x0, 0, 1, &[1, 2, 3, 4]);
    f.outbound(&data[..11]);
    assert!(!f.at_boundary());
    f.outbound(&data[11..]);
    assert!(f.at_boundary());
    f.outbound(&frame(HEADERS, 0, 1, &[0x88]));
    assert!(!f.at_boundary());
    f.outbound(&frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
    assert!(f.at_boundary());
}

#[test]
fn http1_bytes_or_a_shrunk_table_turn_tracking_off() {
    let mut f = Frames::default();
    f.inbound(b"GET / HTTP/1.1\r\n");
    assert!(!f.on());
    let mut f = Frames::default();
    let mut client = PREFACE.to_vec();
    client.extend(frame(SETTINGS, 0, 0, &[0, 1, 0, 0, 0, 0]));
    client.extend(frame(HEADERS, END_HEADERS, 1, &[0x82]));
    fed(&mut f, &client, 5, true);
    assert!(!f.on());
    assert_eq!(f.only_waiting(), None);
    // A larger table is fine; an ACK carries nothing.
    let mut f = Frames::default();
    let mut client = PREFACE.to_vec();
    client.extend(frame(SETTINGS, 0, 0, &[0, 1, 0, 1, 0, 0]));
    client.extend(frame(SETTINGS, ACK, 0, &[]));
    client.extend(frame(HEADERS, END_HEADERS, 1, &[0x82]));
    fed(&mut f, &client, 7, true);
    assert_eq!(f.only_waiting(), Some(1));
}

#[test]
fn an_overlong_settings_frame_turns_tracking_off() {
    let mut f = Frames::default();
    let mut client = PREFACE.to_vec();
    client.extend(frame(SETTINGS, 0, 0, &vec![0; MAX_KEPT + 6]));
    f.inbound(&client);
    assert!(!f.on());
}

#[test]
fn http1_hints_only_for_http11_while_clean() {
    let hints = EarlyHints::new(false);
    let links = [link("</a.css>; rel=preload")];
    assert!(!hints.queue(Version::HTTP_10, &links));
    hints.set_clean(false);
    assert!(!hints.queue(Version::HTTP_11, &links));
    hints.set_clean(true);
    assert!(hints.queue(Version::HTTP_11, &links));
    // One at a time.
    assert!(!hints.queue(Version::HTTP_11, &links));
    assert_eq!(hints.take().unwrap().bytes, h1_hint(&links));
    assert!(hints.take().is_none());
    // No HTTP/2 without frames.
    assert!(!hints.queue(Version::HTTP_2, &links));
}

#[test]
fn http2_hints_wait_for_a_boundary_and_drop_when_the_stream_is_gone() {
    let hints = EarlyHints::new(true);
    let links = [link("</a.css>; rel=preload")];
    let mut client = opening();
    client.extend(frame(HEADERS, END_HEADERS, 1, &[0x82]));
    hints.read(&client);
    let data = frame(0x0, 0, 0, &[0; 4]);
    hints.wrote(&data[..3]);
    assert!(hints.queue(Version::HTTP_2, &links));
    assert!(hints.take().is_none(), "mid-frame");
    hints.wrote(&data[3..]);
    let pending = hints.take().unwrap();
    assert_eq!(pending.bytes, h2_hint(1, &links).unwrap());
    // Queued, then the client resets the stream: dropped.
    assert!(hints.queue(Version::HTTP_2, &links));
    hints.read(&frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    assert!(hints.take().is_none());
    assert!(!hints.queue(Version::HTTP_2, &links));
}

#[test]
fn offer_outside_a_request_sends_nothing() {
    assert!(!offer(&[link("</a.css>; rel=preload")]));
}

#[test]
fn a_queued_hint_is_dropped_when_tracking_goes_off() {
    let links = [link("</a.css>; rel=preload")];
    let mut client = opening();
    client.extend(frame(HEADERS, END_HEADERS, 1, &[0x82]));
    // The client shrinks its HPACK table while the hint waits.
    let hints = EarlyHints::new(true);
    hints.read(&client);
    assert!(hints.queue(Version::HTTP_2, &links));
    let shrink = frame(SETTINGS, 0, 0, &[0, 1, 0, 0, 0, 0]);
    assert!(!hints.read(&shrink));
    assert!(
        !hints.queued.load(Relaxed),
        "cleared when tracking went off"
    );
    assert!(hints.take().is_none());
    // Too many streams while the hint waits (and `take` alone clears it
    // should tracking be off without a read or write seeing it).
    let hints = EarlyHints::new(true);
    hints.read(&client);
    assert!(hints.queue(Version::HTTP_2, &links));
    hints.lock().frames.as_mut().unwrap().state = Track::Off;
    assert!(hints.take().is_none());
    assert!(!hints.queued.load(Relaxed));
    assert!(hints.lock().pending.is_none());
    let mut many = Vec::new();
    for s in 0..=MAX_TRACKED as u32 {
        many.extend(frame(HEADERS, END_HEADERS, 3 + 2 * s, &[0x82]));
    }
    let hints = EarlyHints::new(true);
    hints.read(&client);
    assert!(hints.queue(Version::HTTP_2, &links));
    assert!(!hints.read(&many));
    assert!(!hints.queued.load(Relaxed));
}
