-- register_module.lua: add a module to the registry and emit
-- blackboard.module.registered (RegisterModule).
--
-- KEYS[1]      P:modules                   HASH
-- KEYS[2]      P:events                    STREAM
--
-- ARGV[1] now   ARGV[2] event id prefix   ARGV[3] events MAXLEN
-- ARGV[4] module name   ARGV[5] ModuleInfo JSON   ARGV[6] event payload JSON
--
-- Returns {1}, or {CONFLICT} if the name is taken.

if redis.call('HSETNX', KEYS[1], ARGV[4], ARGV[5]) == 0 then
  return { CONFLICT }
end
emit(KEYS[2], ARGV[3], ARGV[2], ARGV[1], 'blackboard.module.registered', ARGV[6])
return { 1 }
