-- reconciled: nodes say they have re-asserted their jobs for the round of
-- Redis run id ARGV[1] (round.lua). A word for an older round (Redis
-- restarted again since) changes nothing: that node must reconcile again.
-- KEYS[1..3] the round's boot, pending and nodes keys
-- ARGV[1] the run id the agent reconciled for, ARGV[2] the round timeout
-- in ms, ARGV[3] a fixed run id or '' (round.lua's server_run), ARGV[4..]
-- node names
-- returns 1 when the round is over now, 0 while others are awaited, -1
-- when ARGV[1] is not the current round
local run, open = round_state(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
if run ~= ARGV[1] then return -1 end
for i = 4, #ARGV do
  redis.call('SREM', KEYS[2], ARGV[i])
end
if not open or redis.call('SCARD', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[1], 'done', '1')
  return 1
end
return 0
