-- lib.lua: helpers shared by the job store's scripts. scripts.go prepends
-- this file to each script, so it defines locals only and reads no KEYS or
-- ARGV. Every key a helper touches is handed to it by the calling script.

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
