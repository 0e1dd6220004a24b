-- beat: renew nodes' heartbeats in Redis's own time (TIME), so silence is
-- measured on one clock whatever the agents' and scheduler's clocks say,
-- and a Redis that was down cannot make a node look silent to a judge
-- that reads the same clock (see dispatch: silence counts only over a
-- window in which the scheduler itself reached Redis). It also takes part
-- in reconciliation rounds (round.lua): the agent learns whether any of
-- its nodes must re-assert its jobs, and a beat from such a node restarts
-- the round's timeout (it is alive, and working on it).
-- KEYS[1] beats (ZSET node -> epoch ms), KEYS[2..4] the round's boot,
-- pending and nodes keys
-- ARGV[1] the round timeout in ms (used when this step opens a round),
-- ARGV[2] a fixed run id or '' (round.lua's server_run), ARGV[3..] node
-- names
-- returns {Redis's time in epoch ms, the Redis run id, the names of
-- ARGV's nodes that must reconcile this round, the names of ARGV's nodes
-- that are not registered}
--
-- A node that beats but is not registered lost its registration with
-- Redis's data (a restart without persistence, or a rollback to before it
-- registered): its agent registers it again. While a round is open such
-- a node must reconcile too, as a registered one would: the round opened
-- without it, but it runs jobs whose records may have rolled back.
local ms = redis_ms()
local unregistered = {}
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], ms, ARGV[i])
  if redis.call('HEXISTS', KEYS[4], ARGV[i]) == 0 then
    unregistered[#unregistered + 1] = ARGV[i]
  end
end
local run, open = round_state(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
local mine = {}
if open then
  for _, n in ipairs(unregistered) do
    redis.call('SADD', KEYS[3], n)
  end
  for i = 3, #ARGV do
    if redis.call('SISMEMBER', KEYS[3], ARGV[i]) == 1 then
      mine[#mine + 1] = ARGV[i]
    end
  end
  if #mine > 0 then
    -- A node still to reconcile is alive (it beats while it works): the
    -- round's timeout, meant for nodes that are down, counts from now.
    redis.call('HSET', KEYS[2], 'at', ms)
  end
end
return {ms, run, mine, unregistered}
