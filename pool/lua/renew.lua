-- renew: extend the lease if it is still ours at our epoch.
-- KEYS[1] lease, KEYS[2] epoch
-- ARGV[1] epoch, ARGV[2] holder id, ARGV[3] ttl ms
-- returns 1 renewed, 0 lost (expired, or taken by another)
local cur = redis.call('GET', KEYS[1])
if not cur or redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local ep, holder = string.match(cur, '^(%d+) (%S+)')
if ep ~= ARGV[1] or holder ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
