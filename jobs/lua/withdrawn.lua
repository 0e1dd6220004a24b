-- withdrawn.lua: one page of the broker's cancel check: which active jobs'
-- request entries were retracted or superseded. It reads two fields per
-- job inside Redis, so a pass over a deep queue sends a script per page
-- rather than two commands per job.
-- KEYS[1] P:jobs:active ZSET job_id -> accepted_at
-- ARGV[1] the page's first index in KEYS[1], ARGV[2] its length,
-- ARGV[3] the job record key prefix (P:job:), ARGV[4] the entry key
-- prefix (P:entry:); both of KEYS[1]'s board, so of its Cluster slot.
-- Returns {jobs in the page, request entry id, ...}: the request entry
-- ids whose status is retracted or superseded. A key of the wrong type
-- is passed over, as the check did before.
local first = tonumber(ARGV[1])
local ids = redis.call('ZRANGE', KEYS[1], first, first + tonumber(ARGV[2]) - 1)
local out = {#ids}
for _, id in ipairs(ids) do
  local req = redis.pcall('HGET', ARGV[3] .. id, 'request_entry_id')
  if type(req) == 'string' and req ~= '' then
    local st = redis.pcall('HGET', ARGV[4] .. req, 'status')
    if st == 'retracted' or st == 'superseded' then
      out[#out + 1] = req
    end
  end
end
return out
