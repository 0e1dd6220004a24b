-- ack.lua: finish one intake message: acknowledge it and delete it from its
-- lane (the lanes are never trimmed; finished messages are deleted one by
-- one, so XLEN is the true backlog), and optionally add a dead letter, all
-- at once and only if this consumer still owns the message, so a message
-- is dead-lettered at most once even when two brokers race on it.
--
-- KEYS[1]  the message's intake lane stream
-- KEYS[2]  the dead-letter stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name
-- ARGV[3]  message id
-- ARGV[4..] dead-letter field, value pairs; none: no dead letter
--
-- Returns 1 when done now, 0 when the message was no longer pending
-- (already finished), -1 when another consumer owns it (nothing done).
local key, group, consumer, id = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local owner = pending_info(key, group, id)
if owner == nil then
  redis.call('XDEL', key, id)
  return 0
end
if owner ~= consumer then
  return -1
end
redis.call('XACK', key, group, id)
redis.call('XDEL', key, id)
if #ARGV > 3 then
  redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
end
return 1
