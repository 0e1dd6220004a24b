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
-- Messages deleted from the stream (fields false) are skipped.
local function with_counts(key, group, msgs)
  local out = {}
  for _, m in ipairs(msgs) do
    if m[2] then
      local _, n = pending_info(key, group, m[1])
      out[#out + 1] = { m[1], m[2], n or 1 }
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
