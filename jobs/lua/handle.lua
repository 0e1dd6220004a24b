-- handle.lua: store the provider's handle on a running job's record, when
-- the job is still running on the node that started it (an agent stores
-- it right after the start; the job entry does not mirror it).
-- KEYS[1] P:job:<id> HASH the job record
-- ARGV[1] the handle (JSON), ARGV[2] the node that started the job
-- Returns 1 stored, 0 the record is gone, not running, or on another node.
local r = redis.call('HMGET', KEYS[1], 'status', 'node')
if r[1] ~= 'running' or r[2] ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'handle', ARGV[1])
return 1
