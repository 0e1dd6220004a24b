-- deadletter.lua: write the dead letter of one intake message, once, before
-- its job entry says rejected (so whoever sees the rejection finds the dead
-- letter), while this consumer owns the message. The message stays pending:
-- ack.lua finishes it after the job entry, and clears the mark.
--
-- KEYS[1]  the message's intake lane stream
-- KEYS[2]  the dead-letter stream
-- KEYS[3]  P:inbox:compute:dlq:written HASH "<lane key>/<message id>" -> dead letter id
-- KEYS[4]  (a scheduler's broker only) the pool's fencing epoch key
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name
-- ARGV[3]  message id
-- ARGV[4]  dead-letter stream MAXLEN (negative: no cap)
-- ARGV[5]  dead-letter MINID: drop dead letters older than this ('' = none)
-- ARGV[6]  the writer's fencing epoch (read only with KEYS[4])
-- ARGV[7..] dead-letter field, value pairs
--
-- Returns {1, id} when written now, {2, id} when an earlier delivery of the
-- message already wrote it (a crash before the ack), {0} when the message is
-- no longer pending (finished), {-1} when another consumer owns it, {-2}
-- when KEYS[4] holds another epoch (a deposed scheduler: nothing written).
if KEYS[4] and redis.call('GET', KEYS[4]) ~= ARGV[6] then
  return { -2 }
end
local key, group, consumer, id = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local owner = pending_info(key, group, id)
if owner == nil then
  return { 0 }
end
if owner ~= consumer then
  return { -1 }
end
local mark = key .. '/' .. id
local done = redis.call('HGET', KEYS[3], mark)
if done then
  return { 2, done }
end
local fields = {}
for i = 7, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
local dl = add_dead_letter(KEYS[2], ARGV[4], ARGV[5], fields)
redis.call('HSET', KEYS[3], mark, dl)
return { 1, dl }
