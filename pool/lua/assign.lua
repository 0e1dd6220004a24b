-- assign: give a queued job to a node (fenced, and held while a
-- reconciliation round is open: see round.lua).
-- KEYS[1] fencing epoch, KEYS[2] job record (HASH), KEYS[3] the node's
-- assignment stream, KEYS[4] the node's job set, KEYS[5..7] the round's
-- boot, pending and nodes keys
-- ARGV[1] epoch, ARGV[2] node, ARGV[3] job id, ARGV[4] placement JSON,
-- ARGV[5] stream MAXLEN (approximate; 0 = none), ARGV[6] the round timeout
-- in ms (used when this step opens a round), ARGV[7] a fixed run id or ''
-- (round.lua's server_run)
-- The record keeps the placement (field placement), so a newly elected
-- scheduler knows which devices a job holds.
-- returns 1 assigned, 0 the job is not queued (status in reply 2),
--         -1 no such job, -2 fenced (another scheduler's epoch),
--         -3 a reconciliation round is open (the Redis run id in reply 2)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-2, redis.call('GET', KEYS[1]) or ''} end
local run, open = round_state(KEYS[5], KEYS[6], KEYS[7], ARGV[6], ARGV[7])
if open then return {-3, run} end
local st = redis.call('HGET', KEYS[2], 'status')
if not st then return {-1, ''} end
if st ~= 'queued' then return {0, st} end
redis.call('HSET', KEYS[2], 'node', ARGV[2], 'placement', ARGV[4])
redis.call('SADD', KEYS[4], ARGV[3])
if ARGV[5] ~= '0' then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'kind', 'start', 'job', ARGV[3], 'placement', ARGV[4])
else
  redis.call('XADD', KEYS[3], '*', 'kind', 'start', 'job', ARGV[3], 'placement', ARGV[4])
end
return {1, ''}
