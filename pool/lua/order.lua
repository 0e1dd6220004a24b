-- order: send a node a control message for one job (fenced), e.g. stop.
-- KEYS[1] fencing epoch, KEYS[2] the node's assignment stream
-- ARGV[1] epoch, ARGV[2] kind, ARGV[3] job id, ARGV[4] reason,
-- ARGV[5..] more field, value pairs of the message (an eviction's mode and
-- grace)
-- returns 1 sent, -2 fenced
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -2 end
local fields = { 'kind', ARGV[2], 'job', ARGV[3], 'reason', ARGV[4] }
for i = 5, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('XADD', KEYS[2], '*', unpack(fields))
return 1
