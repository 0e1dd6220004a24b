-- lib.lua: helpers shared by the job store's scripts. scripts.go prepends
-- this file to each script, so it defines locals only and reads no KEYS or
-- ARGV itself (accept_check and accept_write read them at the offsets their
-- caller gives). Every key a helper touches is handed to it by the calling
-- script. LuaIntake composes it after blackboard's lib.lua.

-- stale_fence returns nil when the write may go ahead: unfenced (key is
-- nil: the caller passed no fence key) or key holds exactly epoch (the
-- writer's fencing epoch, a decimal string). Otherwise it returns what key
-- holds ('' when nothing): the writer was deposed and must change nothing.
local function stale_fence(key, epoch)
  if not key then
    return nil
  end
  local cur = redis.call('GET', key)
  if cur == epoch then
    return nil
  end
  return cur or ''
end

-- accept_check is accept.lua's reading half, on accept.lua's KEYS from
-- KEYS[kb] and ARGV from ARGV[ab] with fence the fence key (nil:
-- unfenced). It returns nil when the record may be created, else
-- accept.lua's reply (see its header): {-3, epoch}, {-2, type}, {-1,
-- status} or {0, job_id}. It writes nothing.
local function accept_check(kb, ab, fence)
  local stale = stale_fence(fence, ARGV[ab + 3])
  if stale then
    return { -3, stale }
  end
  -- HGET fails only on a key of another type: TYPE is read only then.
  local st = redis.pcall('HGET', KEYS[kb + 3], 'status')
  if type(st) == 'table' and st.err then
    return { -2, redis.call('TYPE', KEYS[kb + 3]).ok }
  end
  if st == 'retracted' or st == 'superseded' or st == 'expired' then
    return { -1, st }
  end
  local existing = redis.call('GET', KEYS[kb + 4])
  if existing then
    return { 0, existing }
  end
  existing = redis.call('HGET', KEYS[kb], ARGV[ab])
  if existing then
    return { 0, existing }
  end
  return nil
end

-- accept_write is accept.lua's writing half (after accept_check): the
-- module's idempotency key, the record from the field, value pairs
-- ARGV[pairs..], and the active index.
local function accept_write(kb, ab, pairs)
  redis.call('SET', KEYS[kb + 4], ARGV[ab + 1])
  redis.call('HSET', KEYS[kb + 1], unpack(ARGV, pairs))
  redis.call('ZADD', KEYS[kb + 2], ARGV[ab + 2], ARGV[ab + 1])
end
