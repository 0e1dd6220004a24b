-- transition.lua: compare-and-set a job's status, so that of two adapters
-- moving the same job (say queued -> running) exactly one succeeds. A job
-- that ends gets its retention: its record, and its module's idempotency
-- key while that still names it, expire.
--
-- KEYS[1]  P:job:<id>    HASH the job record
-- KEYS[2]  P:jobs:active ZSET job_id -> accepted_at
-- KEYS[3]  P:entry:   the prefix of entry keys: a start reads the request
--          entry P:entry:<request_entry_id> (the same board, so the same
--          hash slot)
-- KEYS[4]  P:jobs:idem:  the prefix of the per-module idempotency keys,
--          P:jobs:idem:<len>:<module>:<key>, built from the record
-- KEYS[5]  P:jobs:unmirrored ZSET job_id -> when it last changed: jobs whose
--          change is not yet mirrored onto their job entry
--          (Store.RepairMirrors)
-- KEYS[6]  (fenced writers only) the fencing epoch key, P:pool:epoch
-- ARGV[1]  job id
-- ARGV[2]  expected status (from)
-- ARGV[3]  new status (to)
-- ARGV[4]  "1" when the new status is terminal (the job leaves KEYS[2])
-- ARGV[5]  "1" when the job (re)starts: attempt is incremented
-- ARGV[6]  retention in milliseconds of a terminal job ("" or negative:
--          kept forever). The key expires at it, the record one second
--          later, so a key never names a record that is gone.
-- ARGV[7]  now, epoch seconds (updated_at of a job cancelled at its start)
-- ARGV[8]  the writer's fencing epoch (read only with KEYS[6])
-- ARGV[9]  the node the record must name ("": not checked)
-- ARGV[10..] record field, value pairs to set (updated_at among them;
--          set_fields: the SIDE_FIELDS ones beside the HASH)
--
-- Returns {-2, current epoch} when KEYS[6] is given and does not hold
-- ARGV[8] (a deposed writer: nothing is written), {-1} when there is no
-- such job, {0, current_status} when the status is not ARGV[2], {3,
-- current node} when ARGV[9] is set and the record's node is another
-- (nothing is written then either), {1, record} (the whole record after
-- the change: read_record's {{field, value, ...}, then each SIDE_FIELDS
-- value kept beside it or nil}), and {2, record} when a start
-- (queued -> running) finds the request withdrawn (its entry retracted or
-- superseded, or the record's cancel_requested set): the job is cancelled
-- instead, in this same step, so a retraction that lands before the start
-- always wins.
local stale = stale_fence(KEYS[6], ARGV[8])
if stale then
  return { -2, stale }
end
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return { -1 }
end
if status ~= ARGV[2] then
  return { 0, status }
end
if ARGV[9] ~= '' then
  local node = redis.call('HGET', KEYS[1], 'node') or ''
  if node ~= ARGV[9] then
    return { 3, node }
  end
end
-- retire: the job has ended; it leaves the active set, and its record (with
-- the keys beside it: expire_record) and its idempotency key (while that
-- still names it) expire after ARGV[6].
local function retire()
  redis.call('ZREM', KEYS[2], ARGV[1])
  local keep = tonumber(ARGV[6])
  if keep and keep >= 0 then
    local r = redis.call('HMGET', KEYS[1], 'module', 'idempotency_key')
    if r[1] and r[2] then
      local idem = KEYS[4] .. string.len(r[1]) .. ':' .. r[1] .. ':' .. r[2]
      if redis.call('GET', idem) == ARGV[1] then
        redis.call('PEXPIRE', idem, keep)
      end
    end
    expire_record(KEYS[1], keep + 1000)
  end
end
-- listed: the job is listed in KEYS[5] until its caller has mirrored the
-- change onto the job entry (which takes it off), so that a change whose
-- writer died before its mirror still reaches the modules.
local function listed()
  redis.call('ZADD', KEYS[5], ARGV[7], ARGV[1])
end
if ARGV[2] == 'queued' and ARGV[3] == 'running' then
  local r = redis.call('HMGET', KEYS[1], 'request_entry_id', 'cancel_requested')
  local st = false
  if r[1] then
    st = redis.call('HGET', KEYS[3] .. r[1], 'status')
  end
  if r[2] == '1' or st == 'retracted' or st == 'superseded' then
    redis.call('HSET', KEYS[1], 'status', 'cancelled', 'updated_at', ARGV[7], 'finished_at', ARGV[7],
      'error', '{"code":"cancelled","message":"request retracted before it started"}')
    redis.call('HINCRBY', KEYS[1], 'version', 1)
    retire()
    listed()
    return { 2, unpack(read_record(KEYS[1])) }
  end
end
-- A lost job's true outcome (failed/lost -> succeeded) carries no error.
if ARGV[2] == 'failed' and ARGV[3] == 'succeeded' then
  redis.call('HDEL', KEYS[1], 'error')
end
redis.call('HSET', KEYS[1], 'status', ARGV[3])
set_fields(KEYS[1], 10)
redis.call('HINCRBY', KEYS[1], 'version', 1)
if ARGV[5] == '1' then
  redis.call('HINCRBY', KEYS[1], 'attempt', 1)
end
if ARGV[4] == '1' then
  retire()
end
listed()
return { 1, unpack(read_record(KEYS[1])) }
