-- release: give the lease up (a clean stop), if it is still ours.
-- KEYS[1] lease; ARGV[1] epoch, ARGV[2] holder id
-- returns 1 released, 0 not ours
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local ep, holder = string.match(cur, '^(%d+) (%S+)')
if ep ~= ARGV[1] or holder ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
return 1
