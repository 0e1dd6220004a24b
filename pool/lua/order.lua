-- order: send a node a control message for one job (fenced), e.g. stop.
-- KEYS[1] fencing epoch, KEYS[2] the node's assignment stream
-- ARGV[1] epoch, ARGV[2] kind, ARGV[3] job id, ARGV[4] reason
-- returns 1 sent, -2 fenced
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -2 end
redis.call('XADD', KEYS[2], '*', 'kind', ARGV[2], 'job', ARGV[3], 'reason', ARGV[4])
return 1
