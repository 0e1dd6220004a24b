-- round_open: whether a reconciliation round is open now (round.lua),
-- opening one when the Redis server restarted since the last.
-- KEYS[1..3] the round's boot, pending and nodes keys
-- ARGV[1] the round timeout in ms, ARGV[2] a fixed run id or ''
-- returns 1 open, 0 not
local _, open = round_state(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
if open then return 1 end
return 0
