-- replay.lua: move one dead letter back into an intake lane, once.
--
-- KEYS[1]  the dead-letter stream
-- KEYS[2]  the intake lane to post to
-- KEYS[3]  P:inbox:compute:replayed  SET "<message id> <lane key>" of operator
--          replays: only these skip the admission limits (a replayed field
--          in the message is a hint any poster could write)
-- ARGV[1]  dead-letter id
-- ARGV[2..] intake message field, value pairs
--
-- Returns the new intake message id, or false when the dead letter is gone
-- (already replayed or dropped).
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then
  return false
end
local fields = {}
for i = 2, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('SADD', KEYS[3], id .. ' ' .. KEYS[2])
return id
