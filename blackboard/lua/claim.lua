-- claim.lua: mark an ACTIVE entry consumed and acknowledge the stream message
-- that delivered it, in one step (Consume). Claiming an entry that is already
-- consumed is a no-op that still acknowledges, so redelivery is harmless.
--
-- KEYS[1]      P:entry:<id>                HASH
-- KEYS[2]      P:expiry                    ZSET
-- KEYS[3]      P:events                    STREAM
-- KEYS[4]      stream to XACK (optional; under P, e.g. P:inbox:compute:p4)
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] id    ARGV[5] consumer group    ARGV[6] message id
--
-- Returns {1} claimed; {0} already consumed; {NOT_FOUND}; {CONFLICT, status}.
-- Only the first two acknowledge.

local now, prefix, maxlen, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ek, expiry, events = KEYS[1], KEYS[2], KEYS[3]

local claimed, status = consume_entry(ek, expiry, id, events, maxlen, prefix, now)
if claimed == NOT_FOUND then
  return { NOT_FOUND }
elseif claimed == CONFLICT then
  return { CONFLICT, status }
end
if KEYS[4] then
  redis.call('XACK', KEYS[4], ARGV[5], ARGV[6])
end
return { claimed }
