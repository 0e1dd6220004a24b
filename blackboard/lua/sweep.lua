-- sweep.lua: expire a batch of entries the caller read from P:expiry
-- (Sweep). Each id is re-checked here: entries that are gone or no longer
-- ACTIVE leave the index quietly; ACTIVE entries whose TTL has lapsed at now
-- (strictly) become expired, enter P:retire (see index_retired) and emit
-- blackboard.entry.expired; the rest stay.
--
-- KEYS[1]      P:expiry                    ZSET
-- KEYS[2]      P:events                    STREAM
-- KEYS[3]      P:stats                     HASH
-- KEYS[4]      P:retire                    ZSET
-- KEYS[4+i]    P:entry:<ARGV[4+i]>         HASH, i = 1..n
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] retention (seconds; negative = keep forever)
-- ARGV[4+i] entry id i
--
-- Returns {expired, dropped}.

local now, prefix, maxlen, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local expiry, events, stats, retire = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local expired, dropped = 0, 0
for i = 5, #KEYS do
  local id = ARGV[i]
  local f = redis.call('HMGET', KEYS[i], 'status', 'topic', 'timestamp', 'ttl_seconds')
  local status, topic, ts, ttl = f[1] or 'active', f[2], f[3], f[4]
  if not topic or status ~= 'active' or not ttl then
    redis.call('ZREM', expiry, id)
    dropped = dropped + 1
  elseif lapsed(now, ts, ttl) then
    mark_expired(KEYS[i], expiry, retire, retention, stats, id, topic, events, maxlen, prefix, now)
    expired = expired + 1
  end
end
return { expired, dropped }
