//! The table of clients a limit tracks: a fixed number of entries whatever
//! the flood, in shards (each its own short `Mutex`, never held across an
//! `.await`), the least recently seen client of a shard forgotten first.
//!
//! Entries sit in one `Vec` per shard, linked in use order by index (no
//! allocation once a shard is full); the map from client to entry is a
//! `HashMap` with the process's random hasher, so a flood of chosen
//! addresses cannot pile into one bucket. Knows nothing of rates.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// No entry.
const NIL: u32 = u32::MAX;
/// Shards of a large table: enough that workers rarely meet on one lock.
const SHARDS: usize = 64;
/// Below this many clients, one shard: the bound (and which client is
/// forgotten) is then exact, as a small table in a test expects.
const ONE_SHARD_BELOW: usize = 1024;

/// A client's key (an address, or an IPv6 /64: `mod.rs` decides).
pub(crate) type Key = u128;

/// Up to `capacity` values by key, least recently seen evicted.
pub(crate) struct Table<V> {
    shards: Box<[Mutex<Shard<V>>]>,
    spread: Spread,
}

/// Which shard a key lives in: a hash with the process's random keys, so
/// chosen addresses cannot all land in one shard.
#[derive(Default)]
pub(crate) struct Spread(std::collections::hash_map::RandomState);

impl Spread {
    /// The shard of `key` among `count`.
    pub(crate) fn shard(&self, key: Key, count: usize) -> usize {
        use std::hash::BuildHasher;
        (self.0.hash_one(key) >> 32) as usize % count
    }
}

/// How many shards a table of `capacity` has, and how many entries each.
pub(crate) fn shape(capacity: usize) -> (usize, usize) {
    let count = if capacity < ONE_SHARD_BELOW {
        1
    } else {
        SHARDS
    };
    (count, capacity.div_ceil(count).max(1))
}

impl<V: Default> Table<V> {
    /// A table of at most about `capacity` entries (rounded up to a
    /// multiple of its shards).
    pub(crate) fn new(capacity: usize) -> Self {
        let (count, each) = shape(capacity);
        let shards = (0..count).map(|_| Mutex::new(Shard::new(each))).collect();
        Table {
            shards,
            spread: Spread::default(),
        }
    }

    /// Runs `f` on `key`'s value, made (`V::default()`, `true`) if the
    /// client is new, and marks it the most recently seen.
    pub(crate) fn with<R>(&self, key: Key, f: impl FnOnce(&mut V, bool) -> R) -> R {
        let mut shard = self.shard(key);
        let (at, fresh) = shard.find_or_make(key);
        shard.move_to_front(at);
        f(&mut shard.nodes[at as usize].value, fresh)
    }

    /// Clients tracked now.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    fn shard(&self, key: Key) -> MutexGuard<'_, Shard<V>> {
        lock(&self.shards[self.spread.shard(key, self.shards.len())])
    }
}

/// A shard's lock; a panic while it was held (none is possible in these
/// few lines) leaves entries that are still valid, so it is taken anyway.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One shard: entries in use order, `head` the most recent.
struct Shard<V> {
    map: HashMap<Key, u32>,
    nodes: Vec<Node<V>>,
    head: u32,
    tail: u32,
    capacity: usize,
}

struct Node<V> {
    key: Key,
    prev: u32,
    next: u32,
    value: V,
}

impl<V: Default> Shard<V> {
    fn new(capacity: usize) -> Self {
        Shard {
            map: HashMap::new(),
            nodes: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity,
        }
    }

    /// `key`'s entry, or a new one (the least recently seen one reused
    /// when the shard is full); `true` when new.
    fn find_or_make(&mut self, key: Key) -> (u32, bool) {
        if let Some(&at) = self.map.get(&key) {
            return (at, false);
        }
        let at = if self.nodes.len() < self.capacity {
            self.nodes.push(Node {
                key,
                prev: NIL,
                next: NIL,
                value: V::default(),
            });
            let at = (self.nodes.len() - 1) as u32;
            self.link_front(at);
            at
        } else {
            // Full: the tail (least recently seen) is forgotten.
            let at = self.tail;
            let node = &mut self.nodes[at as usize];
            self.map.remove(&node.key);
            node.key = key;
            node.value = V::default();
            at
        };
        self.map.insert(key, at);
        (at, true)
    }

    fn move_to_front(&mut self, at: u32) {
        if self.head == at {
            return;
        }
        self.unlink(at);
        self.link_front(at);
    }

    fn unlink(&mut self, at: u32) {
        let (prev, next) = {
            let node = &self.nodes[at as usize];
            (node.prev, node.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn link_front(&mut self, at: u32) {
        let old = self.head;
        {
            let node = &mut self.nodes[at as usize];
            node.prev = NIL;
            node.next = old;
        }
        match old {
            NIL => self.tail = at,
            h => self.nodes[h as usize].prev = at,
        }
        self.head = at;
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn a_full_table_forgets_the_least_recently_seen() {
        let table: Table<u32> = Table::new(3);
        for key in 1..=3 {
            table.with(key, |v, fresh| {
                assert!(fresh);
                *v = key as u32;
            });
        }
        // 1 seen again: 2 is now the least recent, and goes for 4.
        table.with(1, |v, fresh| assert!(!fresh && *v == 1));
        table.with(4, |v, fresh| assert!(fresh && *v == 0));
        assert_eq!(table.len(), 3);
        table.with(2, |_, fresh| assert!(fresh, "2 was forgotten"));
        table.with(1, |v, fresh| assert!(!fresh && *v == 1, "1 was kept"));
    }

    #[test]
    fn a_flood_of_clients_stays_within_the_bound() {
        let table: Table<u64> = Table::new(5000);
        for key in 0..200_000u128 {
            table.with(key << 64 | key, |v, _| *v += 1);
        }
        // 64 shards of ceil(5000 / 64) = 79.
        assert!(table.len() <= 64 * 79, "{}", table.len());
        assert!(table.len() > 4000, "{}", table.len());
    }
}
