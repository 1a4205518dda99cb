//! The upstream's origin budget end to end against a real origin socket:
//! a slot held until the answer's body is dropped, and the fleet-wide
//! budget's three answers (`SharedTake`) through the seam fleet/ fills.

#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::*;

/// An origin on 127.0.0.1:0 answering every request 200 `ok`.
async fn origin() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    addr
}

fn upstream(addr: SocketAddr, keys: &str) -> Upstream {
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[upstreams.app]\nservers = [\"{addr}\"]\n{keys}\n\
         [[routes]]\nupstream = \"app\"\n"
    );
    let config = crate::config::Config::from_toml(&text, "<test>").unwrap();
    Upstream::new(&config.upstreams[0], None).unwrap()
}

fn get() -> Request<StreamBody> {
    let mut req = Request::new(empty_body());
    *req.uri_mut() = Uri::from_static("/");
    req
}

/// A fleet budget that answers from a script, counting its questions and
/// the slots given back.
#[derive(Default)]
struct Scripted {
    answers: Mutex<VecDeque<&'static str>>,
    asked: AtomicUsize,
    released: Arc<AtomicUsize>,
}

struct Lease(Arc<AtomicUsize>);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl SharedBudget for Scripted {
    fn take<'a>(
        &'a self,
        upstream: &'a str,
        _server: &'a str,
        limit: u32,
    ) -> Pin<Box<dyn Future<Output = SharedTake> + Send + 'a>> {
        assert_eq!((upstream, limit), ("app", 3));
        self.asked.fetch_add(1, Ordering::SeqCst);
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or("granted");
        let released = self.released.clone();
        Box::pin(async move {
            match answer {
                "full" => SharedTake::Full,
                "unavailable" => SharedTake::Unavailable,
                _ => SharedTake::Granted(Box::new(Lease(released))),
            }
        })
    }
}

fn scripted(answers: &[&'static str]) -> Arc<Scripted> {
    let s = Scripted::default();
    s.answers.lock().unwrap().extend(answers.iter().copied());
    Arc::new(s)
}

#[tokio::test]
async fn a_slot_is_held_until_the_answer_body_is_dropped() {
    let addr = origin().await;
    let u = upstream(addr, "max_inflight = 1\nqueue_timeout = \"200ms\"");
    let resp = u.send(get(), Admission::Wait).await.unwrap();
    assert_eq!(u.stats.budget.inflight.get(), 1);
    // Full: one that may not wait is refused at once, one that may waits
    // queue_timeout, then is shed (counted).
    let e = u.send(get(), Admission::TryOnly).await.unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::OriginBusy { retry_after: 1 }),
        "{e}"
    );
    let e = u.send(get(), Admission::Wait).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::OriginBusy { .. }), "{e}");
    assert_eq!(u.stats.budget.shed_busy.get(), 1);
    assert_eq!(u.stats.errors.get(), 0, "a refusal is no upstream error");
    drop(resp);
    assert_eq!(u.stats.budget.inflight.get(), 0);
    let body = u.send(get(), Admission::Wait).await.unwrap().into_body();
    assert_eq!(body.collect().await.unwrap().to_bytes(), "ok");
    assert_eq!(
        u.stats.budget.inflight.get(),
        0,
        "released at the body's end"
    );
}

#[tokio::test]
async fn the_fleet_budget_is_asked_after_the_local_slot() {
    let addr = origin().await;
    let keys = "max_inflight = 4\nqueue_timeout = \"2s\"\nfleet_max_inflight = 3";
    let u = upstream(addr, keys);
    // Full, then granted: a request that may wait asks again.
    let fleet = scripted(&["full", "full", "granted"]);
    u.set_shared_budget(fleet.clone());
    let resp = u.send(get(), Admission::Wait).await.unwrap();
    assert_eq!(fleet.asked.load(Ordering::SeqCst), 3);
    assert_eq!(
        fleet.released.load(Ordering::SeqCst),
        0,
        "held with the body"
    );
    drop(resp);
    assert_eq!(fleet.released.load(Ordering::SeqCst), 1);
    assert_eq!(u.stats.budget.inflight.get(), 0);
}

#[tokio::test]
async fn a_full_fleet_refuses_at_once_and_one_out_of_reach_fails_open() {
    let addr = origin().await;
    let keys = "max_inflight = 4\nqueue_timeout = \"2s\"\nfleet_max_inflight = 3";
    let u = upstream(addr, keys);
    let fleet = scripted(&["full", "unavailable"]);
    u.set_shared_budget(fleet.clone());
    let e = u.send(get(), Admission::TryOnly).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::OriginBusy { .. }), "{e}");
    assert_eq!(
        u.stats.budget.inflight.get(),
        0,
        "the local slot given back"
    );
    let resp = u.send(get(), Admission::TryOnly).await.unwrap();
    assert_eq!(u.stats.budget.shared_unavailable.get(), 1);
    drop(resp);
    assert_eq!(fleet.asked.load(Ordering::SeqCst), 2);
}
