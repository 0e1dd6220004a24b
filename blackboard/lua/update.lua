-- update.lua: change fields of an entry in place (Update, UpdateIf, Retract),
-- emitting one blackboard.entry.updated event per field whose value changed.
-- An entry whose status is set to expired enters P:retire (see
-- index_retired); one that leaves expired stays there until retire.lua drops
-- it.
--
-- KEYS[1]      P:entry:<id>                HASH
-- KEYS[2]      P:expiry                    ZSET
-- KEYS[3]      P:events                    STREAM
-- KEYS[4..7]   P:prio:0 .. P:prio:3        ZSET
-- KEYS[8]      P:retire                    ZSET
-- KEYS[9]      (optional, ARGV[12] = '1') a ZSET the entry's id leaves
--              when the update applies (Update.Unlist)
-- KEYS[#KEYS]  (optional, ARGV[13] ~= '') the HASH of the update's
--              precondition (Update.Guard)
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] id    ARGV[5] expected status ('' = any)
-- ARGV[6] retention (seconds; negative = keep forever)
-- ARGV[7..11] an event appended after the update's own when it applies
--   (UpdateEmit): type ('' = none), event_id, source, timestamp, payload
-- ARGV[12] '1' when KEYS[9] is the Unlist ZSET, else ''
-- ARGV[13] ARGV[14] the Guard: the update applies only while field ARGV[13]
--   of HASH KEYS[#KEYS] holds ARGV[14] ('' = no guard)
-- ARGV[15..] field/value pairs, in the order data, confidence, status,
--   priority, tags, metadata; values encoded as in the HASH.
--
-- Returns {n_changed}; {STALE} (the guard did not hold); {NOT_FOUND}; or
-- {CONFLICT, current status}: nothing is written then, the event neither.

local now, prefix, maxlen, id, expect, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local ek, expiry, events = KEYS[1], KEYS[2], KEYS[3]

if ARGV[13] ~= '' and redis.call('HGET', KEYS[#KEYS], ARGV[13]) ~= ARGV[14] then
  return { STALE }
end
local cur = redis.call('HMGET', ek, 'status', 'topic', 'timestamp')
if not cur[2] then
  return { NOT_FOUND }
end
local status = cur[1] or 'active'
if expect ~= '' and status ~= expect then
  return { CONFLICT, status }
end
local topic, ts = cur[2], cur[3]

-- Fields absent from a HASH written by another client take the
-- BlackboardEntry defaults.
local defaults = { data = 'null', confidence = '1.0', priority = '1', tags = '[]', metadata = '{}' }

local changed = 0
for i = 15, #ARGV, 2 do
  local field, new = ARGV[i], ARGV[i + 1]
  if field == 'status' then
    if set_status(ek, expiry, id, new, events, maxlen, prefix, now) then
      if new == 'expired' then
        index_retired(KEYS[8], id, now, retention)
      end
      changed = changed + 1
    end
  else
    local old = redis.call('HGET', ek, field) or defaults[field]
    local same
    if field == 'confidence' or field == 'priority' then
      same = tonumber(old) == tonumber(new)
    else
      same = old == new
    end
    if not same then
      redis.call('HSET', ek, field, new)
      local jold, jnew = old, new
      if field == 'priority' then
        redis.call('ZREM', KEYS[4 + tonumber(old)], id)
        redis.call('ZADD', KEYS[4 + tonumber(new)], ts, id)
        jold, jnew = jstr(PRIORITY_NAMES[old]), jstr(PRIORITY_NAMES[new])
      end
      emit(events, maxlen, prefix, now, 'blackboard.entry.updated',
        '{"entry_id":' .. jstr(id) .. ',"topic":' .. jstr(topic) ..
        ',"field":' .. jstr(field) .. ',"old":' .. jold .. ',"new":' .. jnew .. '}')
      changed = changed + 1
    end
  end
end
if ARGV[12] == '1' then
  redis.call('ZREM', KEYS[9], id)
end
if ARGV[7] ~= '' then
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'event_id', ARGV[8], 'event_type', ARGV[7],
    'source', ARGV[9], 'timestamp', ARGV[10], 'payload', ARGV[11])
end
return { changed }
