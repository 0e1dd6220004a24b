-- unregister_module.lua: drop a module from the registry and emit
-- blackboard.module.unregistered (UnregisterModule).
--
-- KEYS[1]      P:modules                   HASH
-- KEYS[2]      P:events                    STREAM
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] module name
--
-- Returns {1}, or {NOT_FOUND}.

if redis.call('HDEL', KEYS[1], ARGV[4]) == 0 then
  return { NOT_FOUND }
end
emit(KEYS[2], ARGV[3], ARGV[2], ARGV[1], 'blackboard.module.unregistered',
  '{"module_name":' .. jstr(ARGV[4]) .. '}')
return { 1 }
