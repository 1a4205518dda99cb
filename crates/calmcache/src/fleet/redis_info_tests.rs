use super::*;

/// Part of redis-server 7.0's `INFO`, as it answers.
const INFO: &str = "# Server\r\nredis_version:7.0.15\r\n\r\n# Memory\r\nused_memory:1048576\r\n\
used_memory_human:1.00M\r\nmaxmemory:4194304\r\nmaxmemory_human:4.00M\r\n\
maxmemory_policy:allkeys-lfu\r\n\r\n# Stats\r\nevicted_keys:12\r\nexpired_keys:3\r\n";

#[test]
fn reads_the_four_fields_of_a_real_answer() {
    let info = parse(INFO);
    assert_eq!(
        info,
        NodeInfo {
            used_memory: Some(1_048_576),
            maxmemory: Some(4_194_304),
            policy: Some("allkeys-lfu".to_owned()),
            evicted_keys: Some(12),
        }
    );
    let m = combine(&[info]);
    assert_eq!(m.used_ratio, Some(0.25));
    assert_eq!(m.nodes, 1);
    assert_eq!(m.warning, None);
}

#[test]
fn missing_or_malformed_fields_read_as_unknown() {
    for text in [
        "",
        "garbage without colons\n\u{0}\u{ff}",
        "used_memory:-1\r\nmaxmemory:12abc\r\nevicted_keys:\r\nmaxmemory_policy:\r\n",
        "used_memory:99999999999999999999999\r\nmaxmemory_policy:ALL KEYS; DROP\r\n",
    ] {
        let info = parse(text);
        assert_eq!(info, NodeInfo::default(), "{text:?}");
        let m = combine(&[info]);
        assert_eq!(m.used_memory, None);
        assert_eq!(m.used_ratio, None);
        assert_eq!(m.maxmemory_policy, None);
        assert_eq!(m.warning, None, "unknown is not a warning");
    }
    // One field missing leaves the others.
    let info = parse("used_memory:10\nmaxmemory_policy:volatile-lru\n");
    assert_eq!(info.used_memory, Some(10));
    assert_eq!(info.maxmemory, None);
    assert_eq!(info.policy.as_deref(), Some("volatile-lru"));
}

#[test]
fn answers_that_are_not_text_are_no_reading() {
    assert!(node_infos(&Value::Nil).is_empty());
    assert!(node_infos(&Value::Int(3)).is_empty());
    assert_eq!(node_infos(&Value::BulkString(INFO.into())).len(), 1);
    let verbatim = Value::VerbatimString {
        format: redis::VerbatimFormat::Text,
        text: INFO.to_owned(),
    };
    assert_eq!(node_infos(&verbatim)[0].evicted_keys, Some(12));
}

#[test]
fn a_cluster_sums_its_masters_and_gives_the_fullest_ratio() {
    let node = |used: u64, max: u64, policy: &str, evicted: u64| {
        Value::BulkString(
            format!(
                "used_memory:{used}\r\nmaxmemory:{max}\r\nmaxmemory_policy:{policy}\r\nevicted_keys:{evicted}\r\n"
            )
            .into_bytes(),
        )
    };
    let addr = |a: &str| Value::BulkString(a.as_bytes().to_vec());
    let answer = Value::Map(vec![
        (addr("127.0.0.1:7000"), node(100, 1000, "allkeys-lfu", 1)),
        (addr("127.0.0.1:7001"), node(900, 1000, "allkeys-lfu", 2)),
        // A node in error: not text.
        (addr("127.0.0.1:7002"), Value::Nil),
    ]);
    let m = combine(&node_infos(&answer));
    assert_eq!(m.nodes, 2, "the node in error is left out");
    assert_eq!(m.used_memory, Some(1000));
    assert_eq!(m.maxmemory, Some(2000));
    assert_eq!(m.used_ratio, Some(0.9));
    assert_eq!(m.evicted_keys, Some(3));
    assert_eq!(m.maxmemory_policy.as_deref(), Some("allkeys-lfu"));

    let answer = Value::Map(vec![
        (addr("a"), node(1, 10, "allkeys-lfu", 0)),
        (addr("b"), node(1, 10, "allkeys-lru", 0)),
    ]);
    let m = combine(&node_infos(&answer));
    assert_eq!(m.maxmemory_policy.as_deref(), Some("mixed"));
    // A node without the field: the sum is unknown, not short.
    let answer = Value::Map(vec![
        (addr("a"), node(1, 10, "allkeys-lfu", 4)),
        (addr("b"), Value::BulkString(b"used_memory:5\r\n".to_vec())),
    ]);
    let m = combine(&node_infos(&answer));
    assert_eq!(m.used_memory, Some(6));
    assert_eq!(m.evicted_keys, None);
}

#[test]
fn no_maxmemory_or_noeviction_is_a_warning() {
    let m = combine(&[parse("maxmemory:0\r\nmaxmemory_policy:allkeys-lfu\r\n")]);
    assert!(m
        .warning
        .as_deref()
        .is_some_and(|w| w.contains("no maxmemory")));
    assert_eq!(m.used_ratio, None, "no limit: no ratio");
    let m = combine(&[parse("maxmemory:100\r\nmaxmemory_policy:noeviction\r\n")]);
    assert!(m
        .warning
        .as_deref()
        .is_some_and(|w| w.contains("noeviction")));
}

#[tokio::test(start_paused = true)]
async fn a_reading_keeps_its_age() {
    let readings = Readings::default();
    assert_eq!(readings.snapshot(), RedisMemory::default());
    readings.store(combine(&[parse(INFO)]));
    tokio::time::advance(Duration::from_millis(1500)).await;
    let m = readings.snapshot();
    assert_eq!(m.read_ms_ago, Some(1500));
    assert_eq!(m.evicted_keys, Some(12));
}

#[test]
fn evicting_is_evicted_keys_rising_between_two_readings() {
    let readings = Readings::default();
    let evicted = |n: &str| combine(&[parse(&format!("evicted_keys:{n}\r\n"))]);
    readings.store(evicted("12"));
    assert!(!readings.evicting(), "one reading says nothing of a rise");
    readings.store(evicted("12"));
    assert!(!readings.evicting(), "evicted long ago, not now");
    readings.store(evicted("40"));
    assert!(readings.evicting());
    readings.store(evicted(""));
    assert!(!readings.evicting(), "unknown is not evicting");
    readings.store(evicted("40"));
    readings.store(evicted("3"));
    assert!(!readings.evicting(), "a restarted Redis counts from 0");
    let used = |used: u64| {
        combine(&[parse(&format!(
            "used_memory:{used}\r\nmaxmemory:1000\r\nevicted_keys:3\r\n"
        ))])
    };
    readings.store(used(700));
    assert!(!readings.evicting(), "room left");
    readings.store(used(800));
    assert!(readings.evicting(), "past 3/4 of maxmemory");
    let unlimited = "used_memory:5000\r\nmaxmemory:0\r\nevicted_keys:3\r\n";
    readings.store(combine(&[parse(unlimited)]));
    assert!(!readings.evicting(), "no limit: never full");
}
