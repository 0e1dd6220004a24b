-- lib.lua: helpers shared by the job store's scripts. scripts.go prepends
-- this file to each script, so it defines locals only and reads no KEYS or
-- ARGV itself (accept_check and accept_write read them at the offsets their
-- caller gives). Every key a helper touches is handed to it by the calling
-- script, or is a record's key plus ':' and a field in SIDE_FIELDS (defined
-- by scripts.go ahead of this file: the record's long fields, kept beside
-- it). LuaIntake composes it after blackboard's lib.lua.

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

-- SIDE is SIDE_FIELDS as a set.
local SIDE = {}
for _, f in ipairs(SIDE_FIELDS) do
  SIDE[f] = true
end

-- side_key is the key of record rk's field f kept beside it
-- (blackboard.Keys.JobField).
local function side_key(rk, f)
  return rk .. ':' .. f
end

-- LISTPACK_VALUE is Redis's default hash-max-listpack-value: a HASH with
-- a longer value is kept as a hash table.
local LISTPACK_VALUE = 64

-- set_fields sets the field, value pairs ARGV[from..] on record rk, in its
-- HASH, except a value of a SIDE field longer than LISTPACK_VALUE: that
-- one goes in its own key beside the record (it would make Redis keep the
-- whole record as a hash table rather than a compact listpack), and the
-- field leaves the HASH, where a value wins over one beside it.
local function set_fields(rk, from)
  local h = {}
  for i = from, #ARGV, 2 do
    local f, v = ARGV[i], ARGV[i + 1]
    if SIDE[f] and #v > LISTPACK_VALUE then
      redis.call('SET', side_key(rk, f), v)
      redis.call('HDEL', rk, f)
    else
      h[#h + 1] = f
      h[#h + 1] = v
    end
  end
  if #h > 0 then
    redis.call('HSET', rk, unpack(h))
  end
end

-- read_record returns record rk as scripts reply it: {HGETALL, then the
-- value of each SIDE_FIELDS key beside it, false when absent}; a field in
-- the HASH wins over its key beside it (set_fields).
local function read_record(rk)
  local r = { redis.call('HGETALL', rk) }
  for i, f in ipairs(SIDE_FIELDS) do
    r[i + 1] = redis.call('GET', side_key(rk, f))
  end
  return r
end

-- expire_record sets record rk and the keys beside it to expire in ms
-- milliseconds.
local function expire_record(rk, ms)
  redis.call('PEXPIRE', rk, ms)
  for _, f in ipairs(SIDE_FIELDS) do
    redis.call('PEXPIRE', side_key(rk, f), ms)
  end
end

-- accept_write is accept.lua's writing half (after accept_check): the
-- module's idempotency key, the record from the field, value pairs
-- ARGV[pairs..] (set_fields), and the active index.
local function accept_write(kb, ab, pairs)
  redis.call('SET', KEYS[kb + 4], ARGV[ab + 1])
  set_fields(KEYS[kb + 1], pairs)
  redis.call('ZADD', KEYS[kb + 2], ARGV[ab + 2], ARGV[ab + 1])
end
