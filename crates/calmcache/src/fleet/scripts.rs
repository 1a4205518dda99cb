//! The Lua scripts that make each fleet step one atomic round trip. Every
//! script touches only the keys of one object, which share the hash tag
//! `{H}` (one cluster slot), or one upstream server's origin slots (one
//! key, `{P}{origin:U/S}:slots`: a sorted set of leases); times are Redis' own clock (`TIME`), so the
//! nodes' clocks never meet.
//!
//! An object's keys: `{P}{H}:m` (hash: `fence`, `since_ms` = when the fill
//! that stored it took its lease, `fresh_until_ms`, `blob` = the object in
//! the disk file format), `:l` (the lease: a node's token, with a TTL),
//! `:f` (the fencing counter), `:p` (the last hard purge, ms).
//!
//! A URI whose responses vary (`Vary`) has, in `:m`, `vary` (the request
//! header names, comma-separated) instead of a blob, and one entry per
//! variant in the same slot: `:v:S` (like `:m`), its lease `:vl:S` (S: the
//! hash of the variant's selecting values), and the set `:vs` of the S
//! stored, so that a purge of the URI reaches every variant. The fencing
//! counter `:f` and the purge time `:p` are the URI's, shared by its
//! variants.
//!
//! `:w` is the writing record of a fill that writes its body to Redis as
//! it arrives (stream_out.rs): its generation, lease token, head and the
//! digests of the pieces written so far, renewed with each piece.

use redis::Script;

/// Redis' clock in milliseconds, as the first lines of every script.
const NOW: &str = "local t = redis.call('TIME')\n\
                   local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n";

/// `acquire(meta, lease, fence, writing; ours_ms, token, lease_ms, purged_before_ms, try)`:
/// `{1, blob, since_ms}`: a fresh copy newer than ours (its lease taken after
/// `purged_before`; `since_ms` is part of what a signed entry signs);
/// `{2, fence, now}`: the lease is ours; `{3, pttl, record, token}`:
/// another node holds it (or `try` is 0: only looked), with the writing
/// record there (`false`: none; stream_out.rs) and the lease's token (a
/// record is followed only when it is the holder's); `{4, names}`: the URI's responses vary on these request
/// headers (ask again for the variant's keys).
pub(crate) fn acquire() -> Script {
    Script::new(&format!(
        "{NOW}\
         local m = redis.call('HMGET', KEYS[1], 'since_ms', 'fresh_until_ms', 'blob', 'vary')\n\
         if m[4] then return {{4, m[4]}} end\n\
         if m[3] and tonumber(m[2]) > now and tonumber(m[1]) > tonumber(ARGV[1])\n\
            and tonumber(m[1]) >= tonumber(ARGV[4]) then\n\
           return {{1, m[3], tonumber(m[1])}}\n\
         end\n\
         local pttl = redis.call('PTTL', KEYS[2])\n\
         if pttl ~= -2 or ARGV[5] == '0' then\n\
           local w = redis.pcall('GET', KEYS[4])\n\
           if type(w) ~= 'string' then w = false end\n\
           return {{3, pttl, w, redis.call('GET', KEYS[2])}}\n\
         end\n\
         if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then\n\
           local f = redis.call('INCR', KEYS[3])\n\
           redis.call('PEXPIRE', KEYS[3], 604800000)\n\
           return {{2, f, now}}\n\
         end\n\
         return {{3, redis.call('PTTL', KEYS[2]), false, false}}\n"
    ))
}

/// `follow(writing, lease, meta; token)`: what a node streaming another
/// node's body (stream_in.rs) looks at: `{record, 1}` while the lease is
/// still `token`'s (the writer's), else `{record, 0, blob, since_ms}`: the
/// lease went (committed, released or lapsed) and the entry is what it
/// left (`false` when none). `record` is `false` when there is none.
pub(crate) fn follow() -> Script {
    Script::new(
        "local w = redis.pcall('GET', KEYS[1])\n\
         if type(w) ~= 'string' then w = false end\n\
         if redis.call('GET', KEYS[2]) == ARGV[1] then return {w, 1} end\n\
         local m = redis.pcall('HMGET', KEYS[3], 'since_ms', 'blob')\n\
         if type(m) ~= 'table' then return {w, 0, false, false} end\n\
         return {w, 0, m[2] or false, m[1] or false}\n",
    )
}

/// `forget_record(writing; gen)`: deletes the writing record if it is
/// still the one of generation `gen` (its first eight bytes): a record a
/// later holder wrote is left alone.
pub(crate) fn forget_record() -> Script {
    Script::new(
        "local w = redis.pcall('GET', KEYS[1])\n\
         if type(w) == 'string' and string.sub(w, 1, 8) == ARGV[1] then\n\
           return redis.call('DEL', KEYS[1])\n\
         end\n\
         return 0\n",
    )
}

/// `commit(meta, lease, purge[, uri, variants]; token, fence, since_ms, fresh_ms, ttl_ms, blob, purged_before_ms[, names, s])`:
/// stores the object unless a hard purge came after the lease was taken
/// (`0`) or a later lease already stored one (`-1`); `1` when stored. The
/// lease is released either way (if still ours). For a variant, `meta` is
/// its `:v:S`, and the URI's `:m` becomes (unless a later lease stored a
/// whole object there) the marker with `names`, `s` joins `:vs`, and both
/// live as long as the longest variant.
pub(crate) fn commit() -> Script {
    Script::new(&format!(
        "{NOW}\
         local function release()\n\
           if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end\n\
         end\n\
         local p = tonumber(redis.call('GET', KEYS[3]) or '0')\n\
         if p >= tonumber(ARGV[3]) or tonumber(ARGV[7]) > tonumber(ARGV[3]) then\n\
           release()\n\
           return 0\n\
         end\n\
         local cur = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')\n\
         if cur > tonumber(ARGV[2]) then release() return -1 end\n\
         redis.call('DEL', KEYS[1])\n\
         redis.call('HSET', KEYS[1], 'fence', ARGV[2], 'since_ms', ARGV[3],\n\
                    'fresh_until_ms', now + tonumber(ARGV[4]), 'blob', ARGV[6])\n\
         redis.call('PEXPIRE', KEYS[1], ARGV[5])\n\
         if KEYS[4] then\n\
           local function outlive(key)\n\
             if redis.call('PTTL', key) < tonumber(ARGV[5]) then redis.call('PEXPIRE', key, ARGV[5]) end\n\
           end\n\
           local u = redis.call('HMGET', KEYS[4], 'fence', 'vary')\n\
           if tonumber(u[1] or '0') <= tonumber(ARGV[2]) then\n\
             redis.call('DEL', KEYS[4])\n\
             redis.call('HSET', KEYS[4], 'vary', ARGV[8], 'fence', ARGV[2], 'since_ms', ARGV[3])\n\
             outlive(KEYS[4])\n\
           elseif u[2] == ARGV[8] then\n\
             outlive(KEYS[4])\n\
           end\n\
           redis.call('SADD', KEYS[5], ARGV[9])\n\
           outlive(KEYS[5])\n\
         end\n\
         release()\n\
         return 1\n"
    ))
}

/// `release(lease; token)`: drops the lease if it is still ours.
pub(crate) fn release() -> Script {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n\
         return 0\n",
    )
}

/// `purge_key(meta, purge, variants; hard, variant_prefix)`: hard removes
/// the object (and every variant of the URI) and records the time (a fill
/// whose lease is older cannot store it back); soft marks them stale (the
/// next node that needs one takes the lease: one fetch).
pub(crate) fn purge_key() -> Script {
    Script::new(&format!(
        "{NOW}\
         local variants = redis.call('SMEMBERS', KEYS[3])\n\
         if ARGV[1] == '1' then\n\
           local gone = redis.call('DEL', KEYS[1])\n\
           for _, s in ipairs(variants) do gone = gone + redis.call('DEL', ARGV[2] .. s) end\n\
           redis.call('DEL', KEYS[3])\n\
           redis.call('SET', KEYS[2], now, 'PX', 604800000)\n\
           return gone\n\
         end\n\
         local marked = 0\n\
         if redis.call('HEXISTS', KEYS[1], 'blob') == 1 then\n\
           redis.call('HSET', KEYS[1], 'fresh_until_ms', 0)\n\
           marked = 1\n\
         end\n\
         for _, s in ipairs(variants) do\n\
           if redis.call('EXISTS', ARGV[2] .. s) == 1 then\n\
             redis.call('HSET', ARGV[2] .. s, 'fresh_until_ms', 0)\n\
             marked = marked + 1\n\
           end\n\
         end\n\
         return marked\n"
    ))
}

/// `purge_before(epoch)`: every object stored by a fill whose lease came
/// before now is ignored from now on (prefix, tag and whole purges: no key
/// scan); returns now.
pub(crate) fn purge_before() -> Script {
    Script::new(&format!(
        "{NOW}\
         local was = tonumber(redis.call('GET', KEYS[1]) or '0')\n\
         if now > was then redis.call('SET', KEYS[1], now) end\n\
         return now\n"
    ))
}

/// `renew(lease; token, lease_ms)`: extends the lease while it is still ours.
pub(crate) fn renew() -> Script {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n\
           return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n\
         end\n\
         return 0\n",
    )
}

/// `epoch(epoch; mine)`: Redis' data generation (set to `mine` if it has
/// none: a Redis that started empty gets a new one) and its clock, `{id, now}`.
pub(crate) fn epoch() -> Script {
    Script::new(&format!(
        "{NOW}\
         redis.call('SET', KEYS[1], ARGV[1], 'NX')\n\
         return {{redis.call('GET', KEYS[1]), now}}\n"
    ))
}

/// `origin_take(slots; lease, limit, lifetime_ms)`: one of `limit`
/// fleet-wide origin slots of one upstream server. `slots` is a sorted set
/// of lease ids scored by their expiry (Redis' clock, ms): the expired ones
/// go, then `lease` joins if fewer than `limit` remain: `{1, now}`
/// (granted) or `{0, taken}` (full). The key lives as long as its
/// longest lease. A value of another type there is none of ours (a stray
/// write): it is deleted and the answer is `{-1}` (the caller fails open
/// this once; the next take starts the set afresh).
pub(crate) fn origin_take() -> Script {
    Script::new(&format!(
        "{NOW}\
         local kind = redis.call('TYPE', KEYS[1])['ok']\n\
         if kind ~= 'zset' and kind ~= 'none' then\n\
           redis.call('DEL', KEYS[1])\n\
           return {{-1}}\n\
         end\n\
         redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n\
         local taken = redis.call('ZCARD', KEYS[1])\n\
         if taken >= tonumber(ARGV[2]) then return {{0, taken}} end\n\
         local lifetime = tonumber(ARGV[3])\n\
         redis.call('ZADD', KEYS[1], now + lifetime, ARGV[1])\n\
         if redis.call('PTTL', KEYS[1]) < lifetime then redis.call('PEXPIRE', KEYS[1], lifetime) end\n\
         return {{1, now}}\n"
    ))
}

/// `origin_renew(slots; lease, lifetime_ms)`: extends a held origin slot's
/// lease from now; `0` when it is gone (it expired: renewals failed).
pub(crate) fn origin_renew() -> Script {
    Script::new(&format!(
        "{NOW}\
         if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' then return 0 end\n\
         if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end\n\
         local lifetime = tonumber(ARGV[2])\n\
         redis.call('ZADD', KEYS[1], 'XX', now + lifetime, ARGV[1])\n\
         if redis.call('PTTL', KEYS[1]) < lifetime then redis.call('PEXPIRE', KEYS[1], lifetime) end\n\
         return 1\n"
    ))
}

/// `members(set, info; name, beat, ttl_ms, max)`: the fleet's membership
/// (members.rs). Both keys share the hash tag `{members}` (one cluster
/// slot): `set` scores each node's name by its last heartbeat (Redis'
/// clock), `info` holds its heartbeat (JSON). With a `name`, that node's
/// heartbeat is stored first; members silent for `ttl_ms` are trimmed; both
/// keys live `ttl_ms` past the last heartbeat. Returns `{now, name, seen_ms,
/// beat, ...}` for at most `max` live members (an empty `name`: only
/// lists, `calmcache check --fleet`).
pub(crate) fn members() -> Script {
    Script::new(&format!(
        "{NOW}\
         local ttl = tonumber(ARGV[3])\n\
         if ARGV[1] ~= '' then\n\
           redis.call('ZADD', KEYS[1], now, ARGV[1])\n\
           redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])\n\
           redis.call('PEXPIRE', KEYS[1], ttl)\n\
           redis.call('PEXPIRE', KEYS[2], ttl)\n\
         end\n\
         local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl), 'LIMIT', 0, 1000)\n\
         for _, n in ipairs(stale) do\n\
           redis.call('ZREM', KEYS[1], n)\n\
           redis.call('HDEL', KEYS[2], n)\n\
         end\n\
         local live = redis.call('ZRANGEBYSCORE', KEYS[1], now - ttl, '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[4]))\n\
         local out = {{now}}\n\
         for i = 1, #live, 2 do\n\
           out[#out + 1] = live[i]\n\
           out[#out + 1] = tonumber(live[i + 1])\n\
           out[#out + 1] = redis.call('HGET', KEYS[2], live[i]) or ''\n\
         end\n\
         return out\n"
    ))
}

/// `leave(set, info; name)`: a node's heartbeat removed at a clean stop.
pub(crate) fn leave() -> Script {
    Script::new(
        "redis.call('ZREM', KEYS[1], ARGV[1])\n\
         redis.call('HDEL', KEYS[2], ARGV[1])\n\
         return 1\n",
    )
}
