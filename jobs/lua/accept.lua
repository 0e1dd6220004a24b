-- accept.lua: create the durable job record for a request, once per
-- idempotency key of its source module, unless the request was withdrawn
-- while it waited.
--
-- KEYS[1]  P:jobs:idem   HASH idempotency_key -> job_id: the layout before
--                        per-module keys, read only (boards from before)
-- KEYS[2]  P:job:<id>    HASH the record of this request's job
-- KEYS[3]  P:jobs:active ZSET job_id -> accepted_at
-- KEYS[4]  P:entry:<id>  HASH the request entry (only its status is read)
-- KEYS[5]  P:jobs:idem:<len>:<module>:<key> STRING job_id: the key of this
--                        request's source module (no TTL while the job is
--                        active; transition.lua sets one when it ends)
-- KEYS[6]  (fenced writers only) the fencing epoch key, P:pool:epoch: the
--          same board, so the same hash slot
-- ARGV[1]  idempotency key
-- ARGV[2]  job id (of this request)
-- ARGV[3]  accepted_at, epoch seconds (the ZSET score)
-- ARGV[4]  the writer's fencing epoch (read only with KEYS[6])
-- ARGV[5..] record field, value pairs
--
-- Returns {-3, current epoch} when KEYS[6] is given and does not hold
-- ARGV[4] (a deposed writer: nothing is read or written). Returns {-2,
-- type} when the request entry key holds something other than a HASH
-- (nothing can read or consume it: the caller dead-letters the request at
-- once). Returns {-1, status} when the request entry is retracted,
-- superseded or expired: nothing is written, the caller finishes the
-- request as cancelled or expired (this is the check that a withdrawn
-- request never starts, made atomically with the record's creation).
-- Otherwise {1, job_id} when the record was created now, {0, job_id} when
-- the module's key already maps to a job (this request's, on redelivery,
-- or another request's of the same module, for a duplicate key; or, on an
-- old board, the key is in KEYS[1]); nothing is written then. A request
-- entry that is gone (removed, evicted) does not stop the request: the
-- intake message carries it.
local r = accept_check(1, 1, KEYS[6])
if r then
  return r
end
accept_write(1, 1, 5)
return { 1, ARGV[2] }
