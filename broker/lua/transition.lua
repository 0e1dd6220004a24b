-- transition.lua: compare-and-set a job's status, so that of two adapters
-- moving the same job (say queued -> running) exactly one succeeds.
--
-- KEYS[1]  P:job:<id>    HASH the job record
-- KEYS[2]  P:jobs:active ZSET job_id -> accepted_at
-- ARGV[1]  job id
-- ARGV[2]  expected status (from)
-- ARGV[3]  new status (to)
-- ARGV[4]  "1" when the new status is terminal (the job leaves KEYS[2])
-- ARGV[5]  "1" when the job (re)starts: attempt is incremented
-- ARGV[6..] record field, value pairs to set (updated_at among them)
--
-- Returns {1, {field, value, ...}} (the whole record after the change),
-- {0, current_status} when the status is not ARGV[2], {-1} when there is no
-- such job.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return { -1 }
end
if status ~= ARGV[2] then
  return { 0, status }
end
local fields = { 'status', ARGV[3] }
for i = 6, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('HINCRBY', KEYS[1], 'version', 1)
if ARGV[5] == '1' then
  redis.call('HINCRBY', KEYS[1], 'attempt', 1)
end
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return { 1, redis.call('HGETALL', KEYS[1]) }
