//! `follow`: what a waiter does after a look at another node's lease.

use super::*;

const LEASE_GONE: i64 = -2;
const NO_EXPIRY: i64 = -1;

fn asking(now: Instant, holders: u8) -> Following {
    Following {
        holders,
        pause: Duration::from_millis(50),
        deadline: now + Duration::from_secs(60),
        stray_deadline: now + Duration::from_secs(3),
    }
}

#[test]
fn a_live_lease_is_followed_past_lock_timeout_until_the_wait_bound() {
    let t0 = Instant::now();
    let a = asking(t0, 1);
    // Long past the old 5 s cap: a live holder is still followed.
    assert_eq!(
        follow(&a, 2_500, t0 + Duration::from_secs(30)),
        Follow::Look
    );
    assert_eq!(
        follow(&a, 2_500, t0 + Duration::from_secs(61)),
        Follow::Alone
    );
}

#[test]
fn a_gone_lease_is_taken_over_once_then_the_waiter_goes_alone() {
    let t0 = Instant::now();
    assert_eq!(follow(&asking(t0, 1), LEASE_GONE, t0), Follow::TakeOver);
    // The takeover's holder ended without a copy too.
    assert_eq!(follow(&asking(t0, 2), LEASE_GONE, t0), Follow::Alone);
}

#[test]
fn a_lease_without_expiry_is_followed_no_longer_than_a_lease() {
    let t0 = Instant::now();
    let a = asking(t0, 1);
    assert_eq!(
        follow(&a, NO_EXPIRY, t0 + Duration::from_secs(1)),
        Follow::Look
    );
    assert_eq!(
        follow(&a, NO_EXPIRY, t0 + Duration::from_secs(4)),
        Follow::Alone
    );
}
