-- intake.lua: helpers (locals only) for a script that accepts a request in
-- one atomic step: accept.lua's record, the compute.job entry as
-- PublishAccepted posts it, and the request entry consumed as
-- ConsumeAccepted does. LuaIntake composes it after blackboard's lib.lua
-- (post_one, consume_entry) and this package's lib.lua (accept_check,
-- accept_write); package broker's intake script calls intake_job and then
-- acknowledges the intake message in the same step.
--
-- intake_job(kb, ab) reads, from KEYS[kb] (INTAKE_KEYS of them):
--   kb+0..kb+4  accept.lua's KEYS[1..5]: P:jobs:idem, P:job:<id>,
--               P:jobs:active, the request entry, the module's idempotency key
--   kb+5        the fencing epoch key (fenced writers; any key of the board
--               otherwise: it is read only when ARGV[ab+3] is not '')
--   kb+6..      the job entry's post (blackboard.Store.PostStep: 15 KEYS)
-- and from ARGV[ab]:
--   ab+0..ab+3  accept.lua's ARGV[1..4]: idempotency key, job id,
--               accepted_at, the writer's epoch ('' = unfenced)
--   ab+4        the request entry id
--   ab+5..      the job entry's post (PostStep: 21 ARGV)
--   ab+26..     the record's field, value pairs, to the end of ARGV
--
-- It returns accept.lua's refusals unchanged ({-3, epoch}, {-2, type},
-- {-1, status}, {0, job_id}) and {2, job_id} when the job entry exists
-- already (left by an earlier refusal of the same request): nothing is
-- written then, and the caller takes the step-by-step path (Accept,
-- PublishAccepted, ConsumeAccepted). Otherwise the record is created, the
-- job entry posted (queued) and the request entry consumed (when active;
-- one that is gone or consumed already is fine), and it returns {1, job_id,
-- the board's entry count after the post}.
local INTAKE_KEYS = 6 + POST_KEYS

local function intake_job(kb, ab)
  local fence = nil
  if ARGV[ab + 3] ~= '' then
    fence = KEYS[kb + 5]
  end
  local r = accept_check(kb, ab, fence)
  if r then
    return r
  end
  local pk, pa = kb + 6, ab + 5
  -- The job entry first: post_one writes nothing when it exists.
  local count = post_one(pk, pa)
  if not count then
    return { 2, ARGV[ab + 1] }
  end
  accept_write(kb, ab, pa + POST_ARGS)
  -- post_one's common keys: expiry at pk+2, events at pk+3; its head:
  -- now, event id prefix, events MAXLEN at pa, pa+1, pa+2.
  consume_entry(KEYS[kb + 3], KEYS[pk + 2], ARGV[ab + 4], KEYS[pk + 3], ARGV[pa + 2], ARGV[pa + 1], ARGV[pa])
  return { 1, ARGV[ab + 1], count }
end
