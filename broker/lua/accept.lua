-- accept.lua: create the durable job record for a request, once per
-- idempotency key, unless the request was withdrawn while it waited.
--
-- KEYS[1]  P:jobs:idem   HASH idempotency_key -> job_id
-- KEYS[2]  P:job:<id>    HASH the record of this request's job
-- KEYS[3]  P:jobs:active ZSET job_id -> accepted_at
-- KEYS[4]  P:entry:<id>  HASH the request entry (only its status is read)
-- ARGV[1]  idempotency key
-- ARGV[2]  job id (of this request)
-- ARGV[3]  accepted_at, epoch seconds (the ZSET score)
-- ARGV[4..] record field, value pairs
--
-- Returns {-1, status} when the request entry is retracted, superseded or
-- expired: nothing is written, the caller finishes the request as cancelled
-- or expired (this is the check that a withdrawn request never starts, made
-- atomically with the record's creation). Otherwise {1, job_id} when the
-- record was created now, {0, job_id} when the key already maps to a job
-- (this request's, on redelivery, or another request's, for a duplicate
-- key); nothing is written then. A request entry that is gone (removed,
-- evicted) does not stop the request: the intake message carries it.
local st = redis.call('HGET', KEYS[4], 'status')
if st == 'retracted' or st == 'superseded' or st == 'expired' then
  return { -1, st }
end
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  return { 0, existing }
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], unpack(ARGV, 4))
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return { 1, ARGV[2] }
