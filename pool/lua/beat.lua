-- beat: renew nodes' heartbeats in Redis's own time (TIME), so silence is
-- measured on one clock whatever the agents' and scheduler's clocks say,
-- and a Redis that was down cannot make a node look silent to a judge
-- that reads the same clock (see dispatch: silence counts only over a
-- window in which the scheduler itself reached Redis).
-- KEYS[1] beats (ZSET node -> epoch ms)
-- ARGV    node names
-- returns Redis's time in epoch ms
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV do
  redis.call('ZADD', KEYS[1], ms, ARGV[i])
end
return ms
