-- ack.lua: finish one intake message: acknowledge it and delete it from its
-- lane (the lanes are never trimmed; finished messages are deleted one by
-- one, so XLEN is the true backlog), clear its dead-letter mark, and
-- optionally add a dead letter (unless deadletter.lua already wrote it), all
-- at once and only if this consumer still owns the message, so a message
-- is dead-lettered at most once even when two brokers race on it.
--
-- KEYS[1]  the message's intake lane stream
-- KEYS[2]  the dead-letter stream
-- KEYS[3]  P:inbox:compute:dlq:written HASH (see deadletter.lua)
-- KEYS[4]  (a scheduler's broker only) the pool's fencing epoch key
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name
-- ARGV[3]  message id
-- ARGV[4]  dead-letter stream MAXLEN (negative: no cap)
-- ARGV[5]  dead-letter MINID ('' = none)
-- ARGV[6]  the writer's fencing epoch (read only with KEYS[4])
-- ARGV[7..] dead-letter field, value pairs; none: no dead letter
--
-- Returns 1 when done now, 0 when the message was no longer pending
-- (already finished), -1 when another consumer owns it (nothing done),
-- -2 when KEYS[4] holds another epoch (a deposed scheduler: nothing done).
if KEYS[4] and redis.call('GET', KEYS[4]) ~= ARGV[6] then
  return -2
end
local fields = nil
if #ARGV > 6 then
  fields = {}
  for i = 7, #ARGV do
    fields[#fields + 1] = ARGV[i]
  end
end
return finish_message(KEYS[1], ARGV[1], ARGV[2], ARGV[3], KEYS[3], KEYS[2], ARGV[4], ARGV[5], fields)
