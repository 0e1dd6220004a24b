-- round.lua, prepended to the scripts that take part in reconciliation
-- rounds (assign, beat, reconciled).
--
-- Redis can come back from a restart having lost acknowledged writes (an
-- AOF with appendfsync everysec on a host crash): a job record, its
-- idempotency key and its intake acknowledgement roll back together, the
-- request is read again, and without care it runs a second time on another
-- node while the first run goes on. So after every restart of the Redis
-- server (its run_id changed: the server's own INFO, read inside the step)
-- a round opens: every registered node must re-assert, from what its agent
-- holds, the jobs it runs (see package agent) and then say so (reconciled);
-- until every node has, or the round's timeout has passed (a node that is
-- down cannot answer; see README, Delivery guarantees), nothing new is
-- assigned. The first gated step under a new run_id opens the round,
-- whichever it is.
--
-- boot    HASH   run (the Redis run_id the round belongs to), at (Redis
--                ms when it opened), timeout (ms), done ("1" once over)
-- pending SET    the nodes that have not reconciled yet this round
-- nodes   HASH   the registered nodes (pool:nodes)

local function redis_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- server_run is the Redis server's run id: fixed when the caller gives one
-- (the embedded blackboard, which lives and dies with its adapter and
-- whose INFO cannot be called from a script), else read with INFO; a user
-- that may not run INFO gets 'unknown', and with it no round after a
-- restart (the adapter warns; see README, Delivery guarantees).
local function server_run(fixed)
  if fixed ~= nil and fixed ~= '' then
    return fixed
  end
  local info = redis.pcall('INFO', 'server')
  if type(info) ~= 'string' then
    return 'unknown'
  end
  return string.match(info, 'run_id:(%x+)') or 'unknown'
end

-- round_state returns the current run id and whether the round is still
-- open (nothing new may be assigned), opening a new round first when the
-- server's run id is not the recorded one. fixed: see server_run.
local function round_state(boot, pending, nodes, timeout, fixed)
  local run = server_run(fixed)
  local cur = redis.call('HMGET', boot, 'run', 'at', 'timeout', 'done')
  local now = redis_ms()
  if cur[1] ~= run then
    redis.call('DEL', pending)
    local names = redis.call('HKEYS', nodes)
    for i = 1, #names, 1000 do
      redis.call('SADD', pending, unpack(names, i, math.min(i + 999, #names)))
    end
    local done = '0'
    if #names == 0 then done = '1' end
    redis.call('HSET', boot, 'run', run, 'at', now, 'timeout', timeout, 'done', done)
    return run, done == '0'
  end
  if cur[4] == '1' then
    return run, false
  end
  if now >= tonumber(cur[2]) + tonumber(cur[3]) or redis.call('SCARD', pending) == 0 then
    redis.call('HSET', boot, 'done', '1')
    return run, false
  end
  return run, true
end
