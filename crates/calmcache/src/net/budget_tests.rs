#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

fn budget(servers: usize, limit: usize) -> Arc<Budget> {
    Budget::new(
        servers,
        limit,
        Duration::from_secs(5),
        Box::new(|_| true),
        Arc::default(),
    )
}

fn slot(taken: Taken) -> Slot {
    match taken {
        Taken::Slot(slot) => slot,
        _ => panic!("no slot"),
    }
}

fn queued(taken: Taken) -> Queued {
    match taken {
        Taken::Queued(q) => q,
        _ => panic!("not queued"),
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

#[tokio::test]
async fn a_full_budget_queues_waiters_and_hands_slots_over_in_arrival_order() {
    let b = budget(1, 1);
    let first = slot(b.take([0], Admission::Wait));
    assert!(matches!(b.take([0], Admission::TryOnly), Taken::Full));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..3 {
        let q = queued(b.take([0], Admission::Wait));
        let tx = tx.clone();
        tokio::spawn(async move {
            let slot = q.wait(soon()).await.unwrap();
            tx.send(n).unwrap();
            // Held a moment, then handed on by its drop.
            tokio::task::yield_now().await;
            drop(slot);
        });
    }
    tokio::task::yield_now().await;
    assert_eq!(b.figures(), (vec![1], 3));
    drop(first);
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(rx.recv().await.unwrap());
    }
    assert_eq!(order, [0, 1, 2], "first come, first served");
    wait_idle(&b).await;
    assert_eq!(b.stats.budget.queued_total.get(), 3);
    assert_eq!(b.stats.budget.inflight.get(), 0);
    assert_eq!(b.stats.budget.queued.get(), 0);
}

async fn wait_idle(b: &Arc<Budget>) {
    for _ in 0..1000 {
        if b.figures() == (vec![0; b.figures().0.len()], 0) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("budget not idle: {:?}", b.figures());
}

#[tokio::test]
async fn a_cancelled_or_timed_out_waiter_never_keeps_a_slot() {
    let b = budget(1, 1);
    let held = slot(b.take([0], Admission::Wait));
    // Times out: nothing frees in time.
    let late = queued(b.take([0], Admission::Wait));
    assert!(late.wait(Instant::now()).await.is_none());
    // Dropped before its slot came.
    let gone = queued(b.take([0], Admission::Wait));
    let next = queued(b.take([0], Admission::Wait));
    drop(gone);
    drop(held);
    let got = next.wait(soon()).await.expect("the live waiter gets it");
    assert_eq!(got.server(), 0);
    drop(got);
    assert_eq!(b.figures(), (vec![0], 0));
    assert_eq!(b.stats.budget.inflight.get(), 0);
}

#[tokio::test]
async fn a_slot_sent_into_a_receiver_dropped_unread_goes_to_the_next_waiter() {
    let b = budget(1, 1);
    let held = slot(b.take([0], Admission::Wait));
    let unread = queued(b.take([0], Admission::Wait));
    let next = queued(b.take([0], Admission::Wait));
    // Handed to `unread`, which never reads it.
    drop(held);
    assert_eq!(b.figures(), (vec![1], 1));
    drop(unread);
    let got = next.wait(soon()).await.expect("passed on by the drop");
    drop(got);
    assert_eq!(b.figures(), (vec![0], 0));
}

#[tokio::test]
async fn two_servers_each_have_their_own_slots_and_a_waiter_takes_whichever_frees() {
    let b = budget(2, 1);
    let a = slot(b.take([0, 1], Admission::Wait));
    let c = slot(b.take([0, 1], Admission::Wait));
    assert_eq!(
        (a.server(), c.server()),
        (0, 1),
        "the other server's free slot"
    );
    assert!(b.try_at(0).is_none());
    let q = queued(b.take([0, 1], Admission::Wait));
    drop(c);
    assert_eq!(q.wait(soon()).await.unwrap().server(), 1);
    drop(a);
    assert_eq!(b.figures(), (vec![0, 0], 0));
}

#[tokio::test]
async fn a_server_that_is_down_never_gets_a_slot() {
    let down = Arc::new(AtomicBool::new(false));
    let flag = down.clone();
    let b = Budget::new(
        2,
        1,
        Duration::from_secs(5),
        Box::new(move |i| !(i == 0 && flag.load(Ordering::Relaxed))),
        Arc::default(),
    );
    let a = slot(b.take([0], Admission::Wait));
    let c = slot(b.take([1], Admission::Wait));
    let q = queued(b.take([0, 1], Admission::Wait));
    down.store(true, Ordering::Relaxed);
    drop(a);
    assert_eq!(
        b.figures(),
        (vec![0, 1], 1),
        "not handed over: server 0 is down"
    );
    assert!(matches!(b.take([1], Admission::TryOnly), Taken::Full));
    drop(c);
    assert_eq!(q.wait(soon()).await.unwrap().server(), 1);
}

#[tokio::test]
async fn a_newcomer_never_jumps_the_queue() {
    let b = budget(2, 1);
    let down = slot(b.take([0], Admission::Wait));
    let other = slot(b.take([1], Admission::Wait));
    let first = queued(b.take([0, 1], Admission::Wait));
    // A slot frees: it is the queued request's, not a newcomer's.
    drop(other);
    assert!(matches!(b.take([1], Admission::TryOnly), Taken::Full));
    assert!(b.try_at(1).is_none());
    assert_eq!(first.wait(soon()).await.unwrap().server(), 1);
    drop(down);
    assert_eq!(b.figures(), (vec![0, 0], 0));
}

#[tokio::test]
async fn the_ahead_lane_is_served_before_the_waiters_and_in_its_own_order() {
    let b = budget(1, 1);
    let first = slot(b.take([0], Admission::Wait));
    assert!(b.is_full());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let lanes = [
        ("wait-0", Admission::Wait),
        ("ahead-0", Admission::Ahead),
        ("wait-1", Admission::Wait),
        ("ahead-1", Admission::Ahead),
    ];
    for (name, admission) in lanes {
        let q = queued(b.take([0], admission));
        let tx = tx.clone();
        tokio::spawn(async move {
            let slot = q.wait(soon()).await.unwrap();
            tx.send(name).unwrap();
            tokio::task::yield_now().await;
            drop(slot);
        });
    }
    tokio::task::yield_now().await;
    assert_eq!(b.figures(), (vec![1], 4));
    // A newcomer that may not wait is refused while anyone waits.
    assert!(matches!(b.take([0], Admission::TryOnly), Taken::Full));
    drop(first);
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(rx.recv().await.unwrap());
    }
    assert_eq!(order, ["ahead-0", "ahead-1", "wait-0", "wait-1"]);
    wait_idle(&b).await;
    assert!(!b.is_full());
}

#[tokio::test]
async fn waiters_that_gave_up_never_make_the_budget_look_full() {
    let b = budget(1, 1);
    let held = slot(b.take([0], Admission::Wait));
    let gone = queued(b.take([0], Admission::Wait));
    assert!(b.is_full());
    drop(gone);
    drop(held);
    assert!(!b.is_full(), "a waiter that left holds nobody back");
    let again = slot(b.take([0], Admission::TryOnly));
    drop(again);
    wait_idle(&b).await;
}

#[tokio::test]
async fn a_trial_takes_a_free_slot_at_its_server_while_others_wait() {
    let up = Arc::new(AtomicBool::new(true));
    let seen = up.clone();
    let b = Budget::new(
        1,
        2,
        Duration::from_secs(5),
        Box::new(move |_| seen.load(Ordering::SeqCst)),
        Arc::default(),
    );
    let first = slot(b.take([0], Admission::Wait));
    let second = slot(b.take([0], Admission::Wait));
    let waiter = queued(b.take([0], Admission::Wait));
    // The server goes down: freed slots go to nobody (waiters need an up
    // server), so one is free at the server while the waiter waits.
    up.store(false, Ordering::SeqCst);
    drop(second);
    assert_eq!(b.figures(), (vec![1], 1));
    // Its one trial is not queued behind the waiter.
    let trial = b.take_trial(0).expect("the trial's slot");
    assert!(b.take_trial(0).is_none(), "the limit still holds");
    drop((trial, first, waiter));
    wait_idle(&b).await;
}
