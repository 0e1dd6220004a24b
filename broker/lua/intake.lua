-- intake.lua: accept one request in one atomic step: package jobs'
-- intake_job (the job record, the compute.job entry posted queued, the
-- request entry consumed) and then ack.lua's finish of the intake message.
-- It runs after jobs.LuaIntake() (blackboard's lib, jobs' lib and
-- intake_job) and this package's lib.lua (finish_message).
--
-- KEYS[1]  the message's intake lane stream
-- KEYS[2]  the dead-letter stream (untouched: no dead letter here)
-- KEYS[3]  P:inbox:compute:dlq:written HASH (see deadletter.lua)
-- KEYS[4..] intake_job's KEYS (jobs/lua/intake.lua): its fence key is
--          this step's
-- ARGV[1]  consumer group
-- ARGV[2]  consumer name
-- ARGV[3]  message id
-- ARGV[4..] intake_job's ARGV (its epoch, ARGV[7], is this step's)
--
-- Returns intake_job's reply when it wrote nothing ({-3, epoch} fenced;
-- {-2, type}, {-1, status}, {0, job_id}, {2, job_id}: the caller takes the
-- step-by-step path); otherwise {1, job_id, entry count, ack} where ack is
-- finish_message's code (1 done, 0 no longer pending, -1 owned by another
-- consumer: the job stands, the message is that consumer's to finish).
local r = intake_job(4, 4)
if r[1] ~= 1 then
  return r
end
r[4] = finish_message(KEYS[1], ARGV[1], ARGV[2], ARGV[3], KEYS[3], KEYS[2], -1, '', nil)
return r
