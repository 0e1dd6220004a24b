-- lib.lua: helpers shared by the broker's scripts. scripts.go prepends this
-- file to each script, so it defines locals only and reads no KEYS or ARGV.
-- Every key a helper touches is handed to it by the calling script.

-- pending_info returns consumer, deliveries for one pending message id of
-- stream key in group, or nil when the id is not pending (acked or unknown).
local function pending_info(key, group, id)
  local p = redis.call('XPENDING', key, group, id, id, 1)
  if p[1] == nil then
    return nil
  end
  return p[1][2], p[1][4]
end

-- with_counts turns stream messages {{id, fields}, ...} into
-- {{id, fields, deliveries}, ...}, reading each delivery count from the PEL.
-- Messages deleted from the stream (fields false) are skipped. With cap
-- (a number; nil: none), a field value longer than cap bytes is replaced by
-- an oversize marker (resp.go's parseOversize): its size, its sha1 and its
-- first prefix bytes, so an oversized message never travels whole.
local function with_counts(key, group, msgs, cap, prefix)
  local out = {}
  for _, m in ipairs(msgs) do
    if m[2] then
      local _, n = pending_info(key, group, m[1])
      local f = m[2]
      if cap then
        for i = 2, #f, 2 do
          local v = f[i]
          if #v > cap then
            f[i] = '\0computeboard:oversize ' .. string.format('%020d', #v) .. ' sha1:' ..
              redis.sha1hex(v) .. '\n' .. string.sub(v, 1, prefix or 0)
          end
        end
      end
      out[#out + 1] = { m[1], f, n or 1 }
    end
  end
  return out
end

-- group_lag returns how many messages of stream key group has not yet
-- delivered (XINFO GROUPS lag), or nil when Redis cannot say: no lag field
-- (Redis < 7), lag unknown, or no such stream or group.
local function group_lag(key, group)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', key)
  if not ok then
    return nil
  end
  for _, g in ipairs(groups) do
    local name, lag
    for j = 1, #g - 1, 2 do
      if g[j] == 'name' then
        name = g[j + 1]
      elseif g[j] == 'lag' then
        lag = g[j + 1]
      end
    end
    if name == group then
      if type(lag) == 'number' then
        return lag
      end
      return nil
    end
  end
  return nil
end

-- add_dead_letter appends a dead letter (fields: a flat {field, value, ...}
-- table) to stream dlq, first dropping those older than minid ('' = keep
-- all: exact, so a test sees the bound) and then trimming to maxlen
-- (negative = no cap). It returns the new dead letter's id.
local function add_dead_letter(dlq, maxlen, minid, fields)
  if minid ~= '' then
    redis.call('XTRIM', dlq, 'MINID', minid)
  end
  if tonumber(maxlen) >= 0 then
    return redis.call('XADD', dlq, 'MAXLEN', maxlen, '*', unpack(fields))
  end
  return redis.call('XADD', dlq, '*', unpack(fields))
end

-- finish_message is ack.lua without its fence check: it finishes message
-- id of intake lane key (group, consumer) when this consumer owns it:
-- XACK, XDEL, its dead-letter mark in marks cleared and, with fields (a
-- flat {field, value, ...} table, or nil) and no mark, a dead letter added
-- to dlq (maxlen, minid as in add_dead_letter). It returns 1 when done now,
-- 0 when the message was no longer pending (deleted, mark cleared), -1
-- when another consumer owns it (nothing done).
local function finish_message(key, group, consumer, id, marks, dlq, maxlen, minid, fields)
  local mark = key .. '/' .. id
  local owner = pending_info(key, group, id)
  if owner == nil then
    redis.call('XDEL', key, id)
    redis.call('HDEL', marks, mark)
    return 0
  end
  if owner ~= consumer then
    return -1
  end
  redis.call('XACK', key, group, id)
  redis.call('XDEL', key, id)
  if redis.call('HDEL', marks, mark) == 0 and fields then
    add_dead_letter(dlq, maxlen, minid, fields)
  end
  return 1
end
