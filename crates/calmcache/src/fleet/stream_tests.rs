//! Read-while-write across the fleet, on a real redis-server: a node
//! streams another node's body piece by piece while it is written, and
//! ends with the committed object; a piece overwritten, a writer that
//! gives up, a purge that refuses the commit and a forged record each end
//! the stream without a byte that did not verify.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;

use super::*;
use crate::fleet::entries::hash_of;
use crate::fleet::tests::{config, lease, object, signed_config};
use crate::fleet::{Before, PieceWriter};
use calmcache_core::PurgeMode;
use calmcache_testkit::redis::Redis;

const LEN: usize = PIECE_SIZE * 2 + 1000;

fn body() -> Vec<u8> {
    (0..LEN).map(|i| (i % 251) as u8).collect()
}

/// The object of a response of `LEN` bytes, with an empty body.
fn head() -> CachedObject {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::CONTENT_LENGTH, LEN.into());
    CachedObject::assemble(
        object("").meta.clone(),
        http::StatusCode::OK,
        headers,
        Bytes::new(),
        Vec::new(),
        None,
    )
}

async fn follow(fleet: &Arc<Fleet>, key: &CacheKey) -> Box<Streamed> {
    let wait = Duration::from_secs(2);
    match fleet
        .before_fetch(key, None, wait, &http::HeaderMap::new())
        .await
    {
        Before::Stream(streamed) => streamed,
        _ => panic!("no stream of the other node's body"),
    }
}

/// Waits (bounded) until `key` is not in Redis.
async fn gone(redis: &Redis, key: &str) {
    for _ in 0..200 {
        if redis.command(&["EXISTS", key]).unwrap() == ":0" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{key} still in redis");
}

async fn piece(streamed: &mut Streamed) -> Bytes {
    match streamed.next().await {
        Ok(Streaming::Piece(piece)) => piece,
        Ok(Streaming::Done) => panic!("done too early"),
        Err(cut) => panic!("cut: {cut:?}"),
    }
}

/// A writer for `key` on `fleet` with the first two pieces pushed (the
/// second goes once the body is past it).
async fn writing(fleet: &Arc<Fleet>, key: &CacheKey, body: &[u8]) -> PieceWriter {
    let mut lease = Some(lease(fleet, key).await);
    let Some(mut writer) = PieceWriter::start(&mut lease, key, &head()) else {
        panic!("a plain object's body goes as it arrives");
    };
    assert!(writer.push(&body[..PIECE_SIZE * 2 + 10]).await);
    writer
}

/// `N` nodes of one fleet on `redis`.
fn nodes<const N: usize>(redis: &Redis) -> [std::sync::Arc<Fleet>; N] {
    std::array::from_fn(|_| Fleet::new(&config(redis)).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_streams_pieces_before_the_body_is_complete() {
    let redis = Redis::start();
    let [a, b, c] = nodes(&redis);
    let key = CacheKey::new("http", "h", "/big");
    let all = body();
    let mut writer = writing(&a, &key, &all).await;
    let mut streamed = follow(&b, &key).await;
    assert_eq!(streamed.head().status, http::StatusCode::OK);
    // Two pieces while the writer has not finished.
    assert_eq!(piece(&mut streamed).await, all[..PIECE_SIZE]);
    assert_eq!(piece(&mut streamed).await, all[PIECE_SIZE..PIECE_SIZE * 2]);
    assert!(writer.push(&all[PIECE_SIZE * 2 + 10..]).await);
    assert!(writer.finish(head()).is_none(), "its manifest commits");
    assert_eq!(piece(&mut streamed).await, all[PIECE_SIZE * 2..]);
    assert!(matches!(streamed.next().await, Ok(Streaming::Done)));
    let object = streamed.object(Bytes::from(all.clone()).into()).unwrap();
    assert_eq!(object.body, all);
    assert_eq!(b.stats.pieces_streamed.load(Ordering::Relaxed), 3);
    // The committed copy (head in the manifest, pieces of the body) reads
    // back whole on a third node.
    match c
        .before_fetch(&key, None, Duration::from_secs(1), &http::HeaderMap::new())
        .await
    {
        Before::Take(object, None) => assert_eq!(object.body, all),
        _ => panic!("the committed copy"),
    }
    gone(&redis, &a.key(&hash_of(&key), "w")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_overwritten_in_redis_cuts_the_stream() {
    let redis = Redis::start();
    let [a, b] = nodes(&redis);
    let key = CacheKey::new("http", "h", "/big");
    let all = body();
    let _writer = writing(&a, &key, &all).await;
    let mut streamed = follow(&b, &key).await;
    let second = a.piece_key(&hash_of(&key), streamed.record.gen, 1);
    // Once the writer wrote it (the record lists it next).
    for _ in 0..200 {
        if redis.command(&["EXISTS", &second]).unwrap() == ":1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    redis.command(&["SET", &second, "x"]).unwrap();
    assert_eq!(piece(&mut streamed).await, all[..PIECE_SIZE]);
    assert_eq!(streamed.next().await.err(), Some(Cut::Bad));
    assert_eq!(b.stats.streams_cut.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_cuts_its_followers_and_deletes_its_pieces() {
    let redis = Redis::start();
    let [a, b] = nodes(&redis);
    let key = CacheKey::new("http", "h", "/big");
    let all = body();
    let writer = writing(&a, &key, &all).await;
    let mut streamed = follow(&b, &key).await;
    assert_eq!(piece(&mut streamed).await, all[..PIECE_SIZE]);
    drop(writer);
    let mut got = 1;
    let cut = loop {
        match streamed.next().await {
            Ok(Streaming::Piece(_)) => got += 1,
            Ok(Streaming::Done) => panic!("a body never committed is never done"),
            Err(cut) => break cut,
        }
    };
    assert!(got <= 2, "only pieces written");
    // The lease went without a manifest, or a piece was deleted first.
    assert!(matches!(cut, Cut::NotCommitted | Cut::Bad), "{cut:?}");
    let hash = hash_of(&key);
    let gen = streamed.record.gen;
    for i in 0..2 {
        gone(&redis, &a.piece_key(&hash, gen, i)).await;
    }
    gone(&redis, &a.key(&hash, "w")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_during_the_write_refuses_the_commit_and_cuts_the_stream() {
    let redis = Redis::start();
    let [a, b] = nodes(&redis);
    let key = CacheKey::new("http", "h", "/big");
    let all = body();
    let mut writer = writing(&a, &key, &all).await;
    let mut streamed = follow(&b, &key).await;
    // The purge's time must come after the lease's (Redis' clock, ms).
    tokio::time::sleep(Duration::from_millis(5)).await;
    b.purge_key(&key, PurgeMode::Hard).await;
    assert!(writer.push(&all[PIECE_SIZE * 2 + 10..]).await);
    assert!(writer.finish(head()).is_none());
    let cut = loop {
        match streamed.next().await {
            Ok(Streaming::Piece(_)) => {}
            Ok(Streaming::Done) => panic!("a purged fill is never done"),
            Err(cut) => break cut,
        }
    };
    // The lease went without a manifest, or a piece was deleted first.
    assert!(matches!(cut, Cut::NotCommitted | Cut::Bad), "{cut:?}");
    gone(&redis, &a.key(&hash_of(&key), "m")).await;
    for i in 0..3 {
        gone(&redis, &a.piece_key(&hash_of(&key), streamed.record.gen, i)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_record_is_refused_on_a_signed_fleet() {
    let redis = Redis::start();
    let (signed_a, signed_b, forger) = (
        Fleet::new(&signed_config(&redis)).unwrap(),
        Fleet::new(&signed_config(&redis)).unwrap(),
        Fleet::new(&config(&redis)).unwrap(),
    );
    let key = CacheKey::new("http", "h", "/big");
    let all = body();
    // A signed writer's record is followed.
    let writer = writing(&signed_a, &key, &all).await;
    let mut streamed = follow(&signed_b, &key).await;
    assert_eq!(piece(&mut streamed).await, all[..PIECE_SIZE]);
    drop(writer);
    // A record written without the secret (over a live lease) is not.
    let other = CacheKey::new("http", "h", "/forged");
    let forged = writing(&forger, &other, &all).await;
    let before = signed_b
        .before_fetch(
            &other,
            None,
            Duration::from_millis(300),
            &http::HeaderMap::new(),
        )
        .await;
    assert!(matches!(before, Before::Fetch(_)), "waited, then fetched");
    assert!(signed_b.stats.entries_refused.load(Ordering::Relaxed) > 0);
    drop(forged);
}
