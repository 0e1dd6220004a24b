-- acquire: take the scheduler lease if nobody holds it, or refresh it if
-- this candidate already does.
-- KEYS[1] lease (STRING "<epoch> <holder> <url>"), KEYS[2] epoch (INCR)
-- ARGV[1] holder id, ARGV[2] url, ARGV[3] ttl ms
-- returns {epoch, 1} refreshed (already ours), {epoch, 2} acquired now,
--         {0, "<epoch> <holder> <url>"} held by another
local cur = redis.call('GET', KEYS[1])
if cur then
  local ep, holder = string.match(cur, '^(%d+) (%S+)')
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {tonumber(ep), 1}
  end
  return {0, cur}
end
local ep = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ep .. ' ' .. ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
return {ep, 2}
