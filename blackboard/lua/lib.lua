-- lib.lua: helpers shared by every script. scripts.go prepends this file to
-- each script, so it defines locals only and reads no KEYS or ARGV itself
-- (post_entry and post_one read them at the offsets their caller gives).
-- Every key a helper touches is handed to it by the calling script. Scripts
-- of other packages that write entries in their own atomic step include it
-- too (LuaLib, compose.go): post_one and consume_entry are their entry
-- points, so an entry is written one way only.

-- Script return codes (mapped to sentinel errors in scripts.go).
local NOT_FOUND = -1
local CONFLICT = -2
local STALE = -3

-- Priority digits as stored in the entry HASH -> names used in event payloads.
local PRIORITY_NAMES = { ['0'] = 'LOW', ['1'] = 'NORMAL', ['2'] = 'HIGH', ['3'] = 'CRITICAL' }

-- Event ids: the caller passes a 24-hex random prefix and each event of the
-- call appends an 8-hex sequence number, giving distinct 32-hex ids.
local event_seq = 0

-- emit appends one lifecycle event (source "blackboard") to the events stream.
local function emit(events, maxlen, prefix, now, etype, payload)
  event_seq = event_seq + 1
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
    'event_id', prefix .. string.format('%08x', event_seq),
    'event_type', etype, 'source', 'blackboard',
    'timestamp', now, 'payload', payload)
end

-- jstr renders a Lua string as a JSON string.
local function jstr(s)
  return cjson.encode(s)
end

-- lapsed reports whether an entry with timestamp ts and TTL ttl (decimal
-- strings, ttl possibly false) has expired at now: now - ts > ttl, strictly.
local function lapsed(now, ts, ttl)
  if not ttl then
    return false
  end
  return tonumber(now) - tonumber(ts) > tonumber(ttl)
end

-- Number of board-wide keys that post and supersede share.
local COMMON_KEYS = 11

-- common_keys reads the COMMON_KEYS board-wide keys that post and supersede
-- share, starting at KEYS[base]: topics, all, expiry, events, stats,
-- prio 0..3, retire, the intake lane registry.
local function common_keys(base)
  local c = {
    topics = KEYS[base], all = KEYS[base + 1], expiry = KEYS[base + 2],
    events = KEYS[base + 3], stats = KEYS[base + 4], prio = {},
    retire = KEYS[base + 9], lanes = KEYS[base + 10],
  }
  for p = 0, 3 do
    c.prio[tostring(p)] = KEYS[base + 5 + p]
  end
  return c
end

-- index_retired schedules an entry that has just become expired for
-- removal: it enters the retire index scored expired_at (now) + retention
-- (seconds, a decimal string; negative = keep forever, not indexed).
local function index_retired(retire, id, now, retention)
  local r = tonumber(retention)
  if r >= 0 then
    redis.call('ZADD', retire, tonumber(now) + r, id)
  end
end

-- Number of ARGV slots one entry occupies in post and supersede.
local ENTRY_ARGS = 16

-- Number of KEYS one entry occupies in post and supersede.
local ENTRY_KEYS = 4

-- post_entry writes one entry (ARGV[o] .. ARGV[o+15]) to its HASH ek, the
-- topic index tk, the source index sk and the common keys c; it emits the
-- added event and, for compute requests, appends to the intake lane lk
-- (registering a per-module lane in c.lanes). An entry posted as expired
-- enters the retire index (see index_retired). The caller has checked that
-- ek does not exist.
local function post_entry(c, ek, tk, sk, lk, o, now, prefix, maxlen, retention)
  local id, topic, source, status = ARGV[o], ARGV[o + 1], ARGV[o + 2], ARGV[o + 3]
  local parent, ts, conf, ttl, prio = ARGV[o + 4], ARGV[o + 5], ARGV[o + 6], ARGV[o + 7], ARGV[o + 8]
  local data, meta, tags = ARGV[o + 9], ARGV[o + 10], ARGV[o + 11]
  local lane, entry_json, added = tonumber(ARGV[o + 12]), ARGV[o + 13], ARGV[o + 14]
  local member, version = ARGV[o + 15], '1'

  local h = { 'entry_id', id, 'topic', topic, 'source_module', source, 'status', status,
    'timestamp', ts, 'confidence', conf, 'priority', prio,
    'data', data, 'metadata', meta, 'tags', tags, 'v', '1' }
  if parent ~= '' then
    h[#h + 1] = 'parent_id'
    h[#h + 1] = parent
  end
  if ttl ~= '' then
    h[#h + 1] = 'ttl_seconds'
    h[#h + 1] = ttl
  end
  redis.call('HSET', ek, unpack(h))
  redis.call('SADD', c.topics, topic)
  redis.call('ZADD', tk, ts, id)
  redis.call('ZADD', sk, ts, id)
  redis.call('ZADD', c.prio[prio], ts, id)
  redis.call('ZADD', c.all, ts, id)
  if ttl ~= '' and status == 'active' then
    redis.call('ZADD', c.expiry, tonumber(ts) + tonumber(ttl), id)
  elseif status == 'expired' then
    index_retired(c.retire, id, now, retention)
  end
  redis.call('HINCRBY', c.stats, 'total_posted', 1)
  emit(c.events, maxlen, prefix, now, 'blackboard.entry.added', added)
  if lane >= 0 then
    if member ~= '' then
      redis.call('SADD', c.lanes, member)
      version = '2'
    end
    redis.call('XADD', lk, '*', 'v', version, 'entry_id', id, 'topic', topic,
      'priority', prio, 'timestamp', ts, 'entry', entry_json)
  end
end

-- set_status moves the entry in HASH ek to status new, keeps the expiry
-- index in step (only ACTIVE entries with a TTL are in it) and emits one
-- updated event. It returns false when the status was already new.
local function set_status(ek, expiry, id, new, events, maxlen, prefix, now)
  local f = redis.call('HMGET', ek, 'status', 'topic', 'timestamp', 'ttl_seconds')
  local old, topic, ts, ttl = f[1], f[2], f[3], f[4]
  if old == new then
    return false
  end
  redis.call('HSET', ek, 'status', new)
  if new == 'active' then
    if ttl then
      redis.call('ZADD', expiry, tonumber(ts) + tonumber(ttl), id)
    end
  else
    redis.call('ZREM', expiry, id)
  end
  emit(events, maxlen, prefix, now, 'blackboard.entry.updated',
    '{"entry_id":' .. jstr(id) .. ',"topic":' .. jstr(topic) ..
    ',"field":"status","old":' .. jstr(old or 'active') .. ',"new":' .. jstr(new) .. '}')
  return true
end

-- mark_expired sets status expired, moves the entry from the expiry index
-- to the retire index (see index_retired), counts it and emits the expired
-- event.
local function mark_expired(ek, expiry, retire, retention, stats, id, topic, events, maxlen, prefix, now)
  redis.call('HSET', ek, 'status', 'expired')
  redis.call('ZREM', expiry, id)
  index_retired(retire, id, now, retention)
  redis.call('HINCRBY', stats, 'total_expired', 1)
  emit(events, maxlen, prefix, now, 'blackboard.entry.expired',
    '{"entry_id":' .. jstr(id) .. ',"topic":' .. jstr(topic) .. '}')
end

-- POST_KEYS and POST_ARGS are how many KEYS and ARGV one entry takes when
-- a script of another package posts it in its own atomic step (post_one;
-- Store.PostStep builds them): post.lua's layout for n = 1.
local POST_KEYS = COMMON_KEYS + ENTRY_KEYS
local POST_ARGS = 5 + ENTRY_ARGS

-- post_one posts, as post.lua would, the one entry whose post.lua KEYS start
-- at KEYS[kb] and ARGV at ARGV[ab] (Store.PostStep's layout). It returns
-- the entry count after the write (ZCARD P:all), or false when the entry's
-- id exists (nothing written).
local function post_one(kb, ab)
  local c = common_keys(kb)
  local ek = KEYS[kb + COMMON_KEYS]
  if redis.call('EXISTS', ek) == 1 then
    return false
  end
  post_entry(c, ek, KEYS[kb + COMMON_KEYS + 1], KEYS[kb + COMMON_KEYS + 2], KEYS[kb + COMMON_KEYS + 3],
    ab + 5, ARGV[ab], ARGV[ab + 1], ARGV[ab + 2], ARGV[ab + 4])
  return redis.call('ZCARD', c.all)
end

-- consume_entry marks the entry in HASH ek consumed when it is active (one
-- updated event). It returns 1 when consumed now, 0 when already consumed,
-- NOT_FOUND when the entry is gone, or CONFLICT and the status it holds.
local function consume_entry(ek, expiry, id, events, maxlen, prefix, now)
  local status = redis.call('HGET', ek, 'status')
  if not status then
    return NOT_FOUND
  end
  if status == 'active' then
    set_status(ek, expiry, id, 'consumed', events, maxlen, prefix, now)
    return 1
  elseif status ~= 'consumed' then
    return CONFLICT, status
  end
  return 0
end
