-- expire.lua: mark an ACTIVE entry expired, emit blackboard.entry.expired and
-- optionally acknowledge the stream message that delivered it (Expire, and
-- Get's lazy expiry). Expiring an already expired entry is a no-op that still
-- acknowledges. A newly expired entry enters P:retire (see index_retired).
--
-- KEYS[1]      P:entry:<id>                HASH
-- KEYS[2]      P:expiry                    ZSET
-- KEYS[3]      P:events                    STREAM
-- KEYS[4]      P:stats                     HASH
-- KEYS[5]      P:retire                    ZSET
-- KEYS[6]      stream to XACK (optional; under P)
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] id
-- ARGV[5] '1' = only if the TTL has lapsed at now, '0' = unconditionally
-- ARGV[6] retention (seconds; negative = keep forever)
-- ARGV[7] consumer group    ARGV[8] message id
--
-- Returns {1} expired; {0} already expired, or TTL not lapsed (with ARGV[5]
-- = '1'; nothing acknowledged then); {NOT_FOUND}; {CONFLICT, status}.

local now, prefix, maxlen, id, check, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local ek, expiry, events, stats, retire = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local f = redis.call('HMGET', ek, 'status', 'topic', 'timestamp', 'ttl_seconds')
local status, topic, ts, ttl = f[1] or 'active', f[2], f[3], f[4]
if not topic then
  return { NOT_FOUND }
end
local done = 0
if status == 'active' then
  if check == '1' and not lapsed(now, ts, ttl) then
    return { 0 }
  end
  mark_expired(ek, expiry, retire, retention, stats, id, topic, events, maxlen, prefix, now)
  done = 1
elseif status ~= 'expired' then
  return { CONFLICT, status }
end
if KEYS[6] then
  redis.call('XACK', KEYS[6], ARGV[7], ARGV[8])
end
return { done }
