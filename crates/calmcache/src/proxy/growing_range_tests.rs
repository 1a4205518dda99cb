#![allow(clippy::unwrap_used)]
use super::*;
use crate::proxy::growing::Keeping;
use http_body_util::BodyExt;
use std::time::Duration;

const TEN: &[u8] = b"0123456789";

fn growing(len: Option<u64>) -> Arc<Growing> {
    Arc::new(Growing::new(len, Keeping::All, None))
}

fn request(range: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
    h
}

fn stored() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::ETAG, HeaderValue::from_static("\"v1\""));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    h
}

async fn answer_of(g: &Arc<Growing>, range: &str) -> (Option<Ranged>, HeaderMap) {
    let mut headers = stored();
    let got = answer(g, &FirstReader::default(), &request(range), &mut headers)
        .await
        .unwrap();
    (got, headers)
}

async fn bytes(body: ResponseBody) -> Bytes {
    tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .expect("the range's bytes without the rest of the body")
        .unwrap()
        .to_bytes()
}

#[tokio::test]
async fn a_range_of_a_known_length_is_sent_before_the_rest_arrives() {
    let g = growing(Some(10));
    let (got, headers) = answer_of(&g, "bytes=2-4").await;
    let got = got.unwrap();
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(headers[header::CONTENT_RANGE], "bytes 2-4/10");
    assert_eq!(headers[header::CONTENT_LENGTH], "3");
    g.push(Bytes::from_static(&TEN[..6]));
    // Never finished: the reader ends with its range.
    assert_eq!(&bytes(got.body).await[..], b"234");
}

#[tokio::test]
async fn a_range_past_what_arrived_waits_for_its_bytes() {
    let g = growing(Some(10));
    let (got, _) = answer_of(&g, "bytes=7-8").await;
    let body = got.unwrap().body;
    let reading = tokio::spawn(bytes(body));
    g.push(Bytes::from_static(&TEN[..5]));
    g.push(Bytes::from_static(&TEN[5..]));
    assert_eq!(&reading.await.unwrap()[..], b"78");
}

#[tokio::test]
async fn an_unsatisfiable_range_of_a_known_length_is_416() {
    let g = growing(Some(10));
    let (got, headers) = answer_of(&g, "bytes=10-").await;
    assert_eq!(got.unwrap().status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(headers[header::CONTENT_RANGE], "bytes */10");
}

#[tokio::test]
async fn unknown_length_a_closed_range_is_answered_once_its_bytes_arrived() {
    let g = growing(None);
    let waiting = {
        let g = g.clone();
        tokio::spawn(async move { answer_of(&g, "bytes=1-3").await })
    };
    g.push(Bytes::from_static(&TEN[..2]));
    g.push(Bytes::from_static(&TEN[2..5]));
    let (got, headers) = waiting.await.unwrap();
    let got = got.unwrap();
    assert_eq!(got.status, StatusCode::PARTIAL_CONTENT);
    // RFC 9110 §14.4: the complete length is not known yet.
    assert_eq!(headers[header::CONTENT_RANGE], "bytes 1-3/*");
    assert_eq!(&bytes(got.body).await[..], b"123");
}

#[tokio::test]
async fn unknown_length_a_suffix_waits_for_the_end() {
    let g = growing(None);
    let waiting = {
        let g = g.clone();
        tokio::spawn(async move { answer_of(&g, "bytes=-3").await })
    };
    g.push(Bytes::from_static(TEN));
    g.finish();
    let (got, headers) = waiting.await.unwrap();
    assert_eq!(headers[header::CONTENT_RANGE], "bytes 7-9/10");
    assert_eq!(&bytes(got.unwrap().body).await[..], b"789");
}

#[tokio::test]
async fn unknown_length_a_range_past_the_end_is_416_once_it_ended() {
    let g = growing(None);
    g.push(Bytes::from_static(TEN));
    g.finish();
    let (got, headers) = answer_of(&g, "bytes=20-30").await;
    assert_eq!(got.unwrap().status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(headers[header::CONTENT_RANGE], "bytes */10");
}

#[tokio::test]
async fn unknown_length_from_the_first_byte_is_the_streaming_200() {
    let g = growing(None);
    assert!(answer_of(&g, "bytes=0-").await.0.is_none());
}

#[tokio::test]
async fn if_range_that_does_not_match_is_the_200() {
    let g = growing(Some(10));
    let mut req = request("bytes=0-1");
    req.insert(header::IF_RANGE, HeaderValue::from_static("\"other\""));
    let mut headers = stored();
    let got = answer(&g, &FirstReader::default(), &req, &mut headers)
        .await
        .unwrap();
    assert!(got.is_none());
    req.insert(header::IF_RANGE, HeaderValue::from_static("\"v1\""));
    let got = answer(&g, &FirstReader::default(), &req, &mut headers)
        .await
        .unwrap();
    assert_eq!(got.unwrap().status, StatusCode::PARTIAL_CONTENT);
}

#[tokio::test]
async fn a_body_that_fails_before_the_range_is_an_error() {
    let g = growing(None);
    g.push(Bytes::from_static(&TEN[..2]));
    g.fail("reset".into());
    let mut headers = stored();
    let got = answer(
        &g,
        &FirstReader::default(),
        &request("bytes=5-6"),
        &mut headers,
    )
    .await;
    assert!(got.is_err());
}

#[tokio::test]
async fn several_ranges_stream_as_multipart_in_the_asked_order() {
    let g = growing(Some(10));
    let (got, headers) = answer_of(&g, "bytes=7-8,0-1").await;
    let got = got.unwrap();
    let ct = headers[header::CONTENT_TYPE].to_str().unwrap().to_owned();
    let boundary = ct.split("boundary=").nth(1).unwrap().to_owned();
    g.push(Bytes::from_static(TEN));
    let body = bytes(got.body).await;
    let len: usize = headers[header::CONTENT_LENGTH]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(body.len(), len);
    let want = format!(
        "--{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 7-8/10\r\n\r\n78\r\n\
         --{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\n01\r\n\
         --{boundary}--\r\n"
    );
    assert_eq!(String::from_utf8_lossy(&body), want);
}

/// Review of issue 25: parts of a chunked body were read one after the
/// other, and a body that stopped being kept between two parts (it outgrew
/// max_object_size) cut the 206 after its head: several ranges of a body of
/// unknown length get the whole 200.
#[tokio::test]
async fn several_ranges_of_an_unknown_length_are_the_200() {
    let g = growing(None);
    g.push(Bytes::from_static(TEN));
    let (got, _) = answer_of(&g, "bytes=7-8,0-1").await;
    assert!(got.is_none(), "the whole 200");
}

#[tokio::test]
async fn a_range_reader_leaves_once_it_has_its_bytes() {
    // A body not kept: a range reader that is done holds nothing back.
    let g = Arc::new(Growing::new(Some(10), Keeping::None, None));
    let reader = g.range_reader(0, 2);
    let mut body = ChannelBody::new(reader, 2);
    g.push(Bytes::from_static(&TEN[..4]));
    let got = std::future::poll_fn(|cx| {
        use http_body::Body;
        std::pin::Pin::new(&mut body).poll_frame(cx)
    })
    .await;
    assert_eq!(&got.unwrap().unwrap().into_data().unwrap()[..], b"01");
    drop(body);
    assert!(g.abandoned());
}

#[tokio::test]
async fn a_suffix_of_a_body_no_longer_kept_is_an_error_not_a_cut_206() {
    // A chunked body that outgrew max_object_size while `-3` waited for
    // its end: its last bytes are gone.
    let g = growing(None);
    g.push(Bytes::from_static(&TEN[..5]));
    g.stop_keeping();
    g.push(Bytes::from_static(&TEN[5..]));
    g.finish();
    let mut headers = stored();
    let got = answer(
        &g,
        &FirstReader::default(),
        &request("bytes=-3"),
        &mut headers,
    )
    .await;
    assert!(got.is_err());
}
