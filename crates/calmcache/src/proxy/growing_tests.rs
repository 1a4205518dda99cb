#![allow(clippy::unwrap_used)]
use super::*;
use http_body_util::BodyExt;

fn growing(len: Option<u64>, keeping: Keeping) -> Arc<Growing> {
    Arc::new(Growing::new(len, keeping, None))
}

#[tokio::test]
async fn late_and_early_readers_get_the_whole_body() {
    let g = growing(Some(6), Keeping::All);
    let early = g.reader();
    g.push(Bytes::from_static(b"abc"));
    let late = g.reader();
    g.push(Bytes::from_static(b"def"));
    g.finish();
    let after = g.reader();
    for body in [early, late, after] {
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"abcdef");
    }
}

#[tokio::test]
async fn a_failed_fetch_ends_every_reader_with_an_error() {
    let g = growing(Some(6), Keeping::All);
    let early = g.reader();
    g.push(Bytes::from_static(b"abc"));
    g.fail("origin reset".into());
    assert!(early.collect().await.is_err());
    assert!(g.reader().collect().await.is_err());
}

#[tokio::test]
async fn a_short_body_is_an_error_not_a_whole_response() {
    let g = growing(Some(10), Keeping::All);
    let r = g.reader();
    g.push(Bytes::from_static(b"abc"));
    g.finish();
    assert!(r.collect().await.is_err());
}

#[tokio::test]
async fn a_body_without_length_ends_when_finished() {
    let g = growing(None, Keeping::All);
    let early = g.reader();
    g.push(Bytes::from_static(b"abc"));
    g.push(Bytes::from_static(b"def"));
    let late = g.reader();
    g.finish();
    for body in [early, late] {
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"abcdef");
    }
}

#[tokio::test]
async fn readers_after_stop_keeping_get_an_error_earlier_ones_the_rest() {
    let g = growing(None, Keeping::All);
    let early = g.reader();
    g.push(Bytes::from_static(b"abc"));
    g.stop_keeping();
    // Past the window: the start is gone for a newcomer.
    let big = Bytes::from(vec![b'x'; WINDOW as usize]);
    let mut early = early;
    assert_eq!(
        &early.frame().await.unwrap().unwrap().into_data().unwrap()[..],
        b"abc"
    );
    g.push(big.clone());
    g.push(Bytes::from_static(b"def"));
    let late = g.reader();
    g.finish();
    let rest = early.collect().await.unwrap().to_bytes();
    assert_eq!(rest.len(), big.len() + 3);
    assert!(late.collect().await.is_err());
}

#[tokio::test]
async fn a_body_that_is_not_kept_holds_only_what_readers_still_need() {
    let g = growing(None, Keeping::None);
    let mut a = g.reader();
    let mut b = g.reader();
    g.push(Bytes::from_static(b"abc"));
    assert_eq!(g.held(), 3);
    a.frame().await.unwrap().unwrap();
    assert_eq!(g.held(), 3, "b still needs it");
    b.frame().await.unwrap().unwrap();
    assert_eq!(g.held(), 0);
}

#[tokio::test]
async fn a_lagging_reader_of_a_body_not_kept_is_cut_when_others_go_on() {
    let g = growing(None, Keeping::None);
    let mut fast = g.reader();
    let slow = g.reader();
    let chunk = Bytes::from(vec![7u8; 64 * 1024]);
    for _ in 0..16 {
        g.push(chunk.clone());
        fast.frame().await.unwrap().unwrap();
        assert!(g.held() <= WINDOW + chunk.len() as u64, "{}", g.held());
    }
    g.finish();
    assert!(fast.collect().await.is_ok());
    assert!(slow.collect().await.is_err(), "the slow reader is cut");
}

#[tokio::test]
async fn the_only_reader_of_a_body_not_kept_slows_the_fill() {
    let g = growing(None, Keeping::None);
    let mut only = g.reader();
    let chunk = Bytes::from(vec![1u8; 64 * 1024]);
    for _ in 0..4 {
        g.push(chunk.clone());
    }
    let waits = tokio::time::timeout(std::time::Duration::from_millis(50), g.room()).await;
    assert!(waits.is_err(), "a full window makes the fill wait");
    only.frame().await.unwrap().unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), g.room())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_reader_behind_the_window_reads_the_file() {
    let dir = std::env::temp_dir().join(format!("calmcache-growing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("body");
    let body: Vec<u8> = (0..(3 * WINDOW as usize))
        .map(|i| (i % 251) as u8)
        .collect();
    std::fs::write(&path, &body).unwrap();
    let file = Arc::new(std::fs::File::open(&path).unwrap());
    let g = growing(Some(body.len() as u64), Keeping::File);
    let late_start = g.reader();
    for part in body.chunks(32 * 1024) {
        g.push(Bytes::copy_from_slice(part));
    }
    g.written(Written {
        file,
        body_at: 0,
        len: body.len() as u64,
    });
    assert!(g.held() <= WINDOW, "held {}", g.held());
    g.finish();
    let got = late_start.collect().await.unwrap().to_bytes();
    assert_eq!(&got[..], &body[..]);
    let newcomer = g.reader().collect().await.unwrap().to_bytes();
    assert_eq!(&newcomer[..], &body[..]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn held_bytes_are_counted_in_the_gauge_until_the_body_goes() {
    let inflight = Arc::new(crate::telemetry::inflight::Inflight::new(1 << 30));
    let g = Arc::new(Growing::new(None, Keeping::All, inflight.admit()));
    g.push(Bytes::from_static(b"abcdef"));
    assert_eq!(inflight.held(), 6);
    drop(g);
    assert_eq!(inflight.held(), 0);
}
