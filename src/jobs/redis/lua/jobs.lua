-- The Jobs API's commands: enqueue, lease, settle, browse.

local commands = {}

-- `list` without repeats, in order.
local function unique(list)
  local seen, kept = {}, {}
  for _, item in ipairs(list) do
    if not seen[item] then
      seen[item] = true
      kept[#kept + 1] = item
    end
  end
  return kept
end

-- A new job's throttles, as reqless keeps them: the limits its `limits`
-- header names, then its queue's own throttle.
local function job_throttles(headers, queue)
  local throttles = {}
  for _, pair in ipairs(decode_list(headers)) do
    if type(pair) == 'table' and pair[1] == 'limits' and type(pair[2]) == 'string' then
      for name in string.gmatch(pair[2], '[^,]+') do
        name = string.match(name, '^%s*(.-)%s*$')
        if name ~= '' then throttles[#throttles + 1] = name end
      end
    end
  end
  throttles[#throttles + 1] = NS .. 'q:' .. queue
  return unique(throttles)
end

-- Fields of one job in a put, after mode and queue.
local PUT_FIELDS = 14

-- put MODE QUEUE then per job: JID KLASS DATA PRIORITY TAGS DELAY RETRIES
-- DEPENDS HAS_BODY BODY HEADERS MADE (1: dque made the id up) UNIQUE_UNTIL
-- (Unix ms, 0: none) UNIQUE_STATES. MODE `new`: an id that is waiting,
-- scheduled, running or depending anywhere is left alone (answer 0), and
-- so is one held by a job within its uniqueness period (answer
-- `done:UNTIL` or `dead:UNTIL`, see unique.lua);
-- `move`: such a job is moved here (qless's put). Answers 1 or 0 per job.
-- All jobs are checked before any is written.
function commands.put(now, real, args)
  local mode, queue = args[1], args[2]
  if queue == nil or queue == '' then return ERR.invalid('a queue name is needed') end
  local jobs = {}
  for i = 3, #args, PUT_FIELDS do
    local job = {
      jid = args[i], klass = args[i + 1], data = args[i + 2], priority = tonumber(args[i + 3]),
      tags = unique(decode_list(args[i + 4])), delay = tonumber(args[i + 5]), retries = tonumber(args[i + 6]),
      depends = decode_list(args[i + 7]), has_body = args[i + 8] == '1', body = args[i + 9],
      headers = args[i + 10], made = args[i + 11] == '1',
      unique_until = tonumber(args[i + 12]) or 0, unique_states = tonumber(args[i + 13]) or 0,
    }
    if not job.jid or job.jid == '' then return ERR.invalid('a job id is needed') end
    if not job.priority or not job.delay or not job.retries or job.retries < 0 then
      return ERR.invalid('job ' .. job.jid .. ': priority, delay and retries must be numbers')
    end
    jobs[#jobs + 1] = job
  end
  promote(queue, now)
  local added = {}
  for _, new in ipairs(jobs) do
    local key = job_key(new.jid)
    local old = load_job(new.jid)
    local held = nil
    if mode == 'new' and not new.made and not (old and ACTIVE[old.state]) then
      held = unique_held(new.jid, old, now)
    end
    if old and mode == 'new' and ACTIVE[old.state] then
      added[#added + 1] = 0
    elseif held then
      added[#added + 1] = held
    else
      if old and mode == 'new' and old.state == 'failed' then
        -- The dead letter stays, beside the new job (aside.lua).
        set_aside(new.jid, old, true)
      elseif old then
        unplace(new.jid, old)
      end
      if old then
        for _, tag in ipairs(decode_list(old.tags)) do
          redis.call('zrem', NS .. 't:' .. tag, new.jid)
          if tonumber(redis.call('zincrby', NS .. 'tags', -1, tag)) <= 0 then
            redis.call('zrem', NS .. 'tags', tag)
          end
        end
        for _, dependency in ipairs(redis.call('smembers', key .. '-dependencies')) do
          redis.call('srem', job_key(dependency) .. '-dependents', new.jid)
        end
        redis.call('del', key .. '-dependencies')
        redis.call('hdel', key, 'dque-body', 'dque-headers', 'dque-score', 'dque-prio', 'dque-lease',
          'dque-died', 'dque-made', 'dque-seq', 'failure', 'scheduled', 'grace')
      end
      redis.call('hset', key, 'jid', new.jid, 'klass', new.klass, 'data', new.data,
        'priority', new.priority, 'tags', cjson.encode(new.tags), 'state', 'waiting', 'worker', '',
        'expires', 0, 'queue', queue, 'retries', new.retries, 'remaining', new.retries,
        'time', time_text(now), 'dque-put', time_text(now),
        'throttles', cjson.encode(job_throttles(new.headers, queue)))
      if new.has_body then redis.call('hset', key, 'dque-body', new.body) end
      if new.headers ~= '' then redis.call('hset', key, 'dque-headers', new.headers) end
      if new.made then redis.call('hset', key, 'dque-made', 1) end
      if new.unique_until > 0 then
        unique_hold(new.jid, new.unique_until, new.unique_states, now)
      end
      history(new.jid, now, 'put', { q = queue })
      redis.call('zadd', NS .. 'queues', 'NX', now, queue)
      for _, tag in ipairs(new.tags) do
        redis.call('zadd', NS .. 't:' .. tag, now, new.jid)
        redis.call('zincrby', NS .. 'tags', 1, tag)
      end
      local waiting_on = 0
      for _, dependency in ipairs(new.depends) do
        local state = redis.call('hget', job_key(dependency), 'state')
        if state and state ~= 'complete' then
          redis.call('sadd', key .. '-dependencies', dependency)
          redis.call('sadd', job_key(dependency) .. '-dependents', new.jid)
          waiting_on = waiting_on + 1
        end
      end
      if waiting_on > 0 then
        redis.call('hset', key, 'state', 'depends')
        redis.call('zadd', queue_key(queue, 'depends'), now, new.jid)
      elseif new.delay > 0 then
        redis.call('hset', key, 'state', 'scheduled')
        add_scheduled(queue, new.jid, now + new.delay)
      else
        add_work(queue, new.jid, new.priority, now)
      end
      added[#added + 1] = 1
    end
  end
  return added
end

-- Whether throttle `tid` has room: locks of jobs no longer running (a
-- qless-py worker, which knows no throttles, settled them) are dropped
-- before it is found full (but those `taking`, this pop's own).
local function throttle_has_room(tid, taking)
  local max = throttle_max(tid)
  if max == 0 then return true end
  local locks = throttle_key(tid, 'locks')
  if redis.call('zcard', locks) < max then return true end
  for _, held in ipairs(redis.call('zrange', locks, 0, -1)) do
    local state = redis.call('hget', job_key(held), 'state')
    if state ~= 'running' and state ~= 'stalled' and not taking[held] then
      redis.call('zrem', locks, held)
    end
  end
  return redis.call('zcard', locks) < max
end

-- The negation of a score as Redis wrote it (its digits kept exactly).
local function negated(score)
  if string.sub(score, 1, 1) == '-' then return string.sub(score, 2) end
  return '-' .. score
end

-- At most this many jobs whose throttles are full one pop sets aside.
local MAX_THROTTLED = 1000

-- Takes up to COUNT jobs off the top of the work set whose throttles all
-- have room, their locks taken (reqless's acquire); a job whose throttle
-- is full waits in the queue's `throttled` set and on that throttle's
-- `pending` set (its score kept, to come back to its place), as reqless
-- does. Answers JID SCORE pairs.
local function take_work(queue, count, now)
  local work = queue_key(queue, 'work')
  local taken, taking, set_aside = {}, {}, 0
  while #taken < 2 * count and set_aside < MAX_THROTTLED do
    local top = redis.call('zrevrange', work, 0, 0, 'WITHSCORES')
    if #top == 0 then break end
    local jid, score = top[1], top[2]
    redis.call('zrem', work, jid)
    local key = job_key(jid)
    local throttles = decode_list(redis.call('hget', key, 'throttles'))
    local full
    for _, tid in ipairs(throttles) do
      if not throttle_has_room(tid, taking) then full = tid break end
    end
    if full then
      set_aside = set_aside + 1
      -- Scored by its work score negated, so that the throttle lets the
      -- first in the queue's order back first (its priority, then FIFO):
      -- reqless's time of pending would let the first set aside back
      -- first, ties by jid.
      redis.call('zadd', throttle_key(full, 'pending'), negated(score), jid)
      redis.call('zadd', queue_key(queue, 'throttled'), now, jid)
      redis.call('hset', key, 'state', 'throttled', 'dque-score', score,
        'dque-prio', redis.call('hget', key, 'priority'))
    else
      for _, tid in ipairs(throttles) do
        redis.call('zadd', throttle_key(tid, 'locks'), 1, jid)
      end
      taking[jid] = true
      taken[#taken + 1] = jid
      taken[#taken + 1] = score
    end
  end
  return taken
end

-- Jobs set aside wait outside the work set until a holder's end lets
-- them back; a holder a client that knows no throttles ended (qless-py:
-- a job dque leased, taken over when its lease ran out, and completed)
-- leaves its lock behind and lets nothing back. So a pop looks at the
-- throttles of the first 10 jobs set aside in QUEUE and, where one has
-- room once such locks are dropped, lets its pending jobs back.
local function recheck_throttled(queue)
  local checked = {}
  for _, jid in ipairs(redis.call('zrange', queue_key(queue, 'throttled'), 0, 9)) do
    for _, tid in ipairs(decode_list(redis.call('hget', job_key(jid), 'throttles'))) do
      if not checked[tid] then
        checked[tid] = true
        if throttle_has_room(tid, {}) then release_pending(tid) end
      end
    end
  end
end

-- pop QUEUE WORKER COUNT LEASE_SECONDS TOKEN: leases up to COUNT jobs,
-- each until REAL + LEASE_SECONDS, with tokens TOKEN:1, TOKEN:2, ...
-- (TOKEN starts with `WORKER|`). Nothing from a paused queue, and no more
-- than its `<queue>-max-concurrency` running at once, as qless.
function commands.pop(now, real, args)
  local queue, worker = args[1], args[2]
  local count, lease_for, token = tonumber(args[3]), tonumber(args[4]), args[5]
  if redis.call('sismember', NS .. 'paused_queues', queue) == 1 then return {} end
  promote(queue, now)
  reclaim(queue, now, real)
  recheck_throttled(queue)
  local most = config_number(queue .. '-max-concurrency', 0)
  if most > 0 then
    count = math.min(count, most - redis.call('zcard', queue_key(queue, 'locks')))
  end
  if count <= 0 then return {} end
  -- qless-core's pop spawns the jobs of due recurring jobs (recurring.lua).
  commands.recur_spawn(now, real, { queue, count })
  local popped = take_work(queue, count, now)
  local replies = {}
  if #popped > 0 then
    redis.call('zadd', NS .. 'workers', now, worker)
  end
  for i = 1, #popped, 2 do
    local jid, score = popped[i], popped[i + 1]
    local job = load_job(jid)
    local expires = real + lease_for
    local lease = token .. ':' .. ((i + 1) / 2)
    -- The Jobs API counts the wait to a job's first lease only (a retry
    -- is not a new wait); a qless client's own pop counts every pop.
    if tonumber(job.remaining) == tonumber(job.retries) then
      record_duration('wait', queue, now, now - (tonumber(job.time) or now))
    end
    redis.call('hset', job_key(jid), 'state', 'running', 'worker', worker, 'expires', expires,
      'time', time_text(now), 'dque-score', score, 'dque-prio', job.priority, 'dque-lease', lease)
    redis.call('zadd', queue_key(queue, 'locks'), expires, jid)
    redis.call('zadd', worker_key(worker), expires, jid)
    history(jid, now, 'popped', { worker = worker })
    job.state, job.worker, job['dque-lease'] = 'running', worker, lease
    replies[#replies + 1] = job_reply(job, 'running', expires)
  end
  return replies
end

-- peek QUEUE COUNT: the jids the next pop of COUNT would look at first
-- (jobs whose lease ran out, then the top of the work set), after due
-- delayed jobs are made ready and due recurring jobs spawned, as
-- qless-core's peek does; it leases nothing.
function commands.peek(now, real, args)
  local queue, count = args[1], tonumber(args[2])
  if not queue or not count then return ERR.invalid('peek: a queue and a count are needed') end
  if count <= 0 then return {} end
  promote(queue, now)
  local jids = redis.call('zrangebyscore', queue_key(queue, 'locks'), '-inf', real, 'LIMIT', 0, count)
  commands.recur_spawn(now, real, { queue, count - #jids })
  if #jids < count then
    for _, jid in ipairs(redis.call('zrevrange', queue_key(queue, 'work'), 0, count - #jids - 1)) do
      jids[#jids + 1] = jid
    end
  end
  return jids
end

-- A command on a held lease, its arguments JID QUEUE WORKER TOKEN and
-- then its own: `body(now, real, job, own)` runs only while the lease
-- holds (`job.worker` is then the caller's worker).
local function on_lease(body)
  return function(now, real, args)
    local job, err = held_job(args[1], args[2], args[3], args[4], real)
    if not job then return err end
    return body(now, real, job, { unpack(args, 5) })
  end
end

-- Ends a held job's lease: its locks and dque's token go.
local function end_lease(job)
  drop_lock(job.jid, job.queue, job.worker, job.throttles)
  redis.call('hdel', job_key(job.jid), 'dque-lease')
end

-- complete ... NEXT_QUEUE DELAY: ends a held job, or (NEXT_QUEUE) moves it
-- on to another queue, ready after DELAY.
commands.complete = on_lease(function(now, real, job, own)
  local jid, next_queue, delay = job.jid, own[1], tonumber(own[2]) or 0
  local key = job_key(jid)
  end_lease(job)
  record_duration('run', job.queue, now, now - (tonumber(job.time) or now))
  history(jid, now, 'done')
  redis.call('hdel', key, 'dque-score')
  -- qless restores a completed job's retries (it starts over in a next
  -- queue).
  redis.call('hset', key, 'remaining', job.retries)
  if next_queue ~= '' then
    redis.call('hset', key, 'queue', next_queue, 'worker', '', 'expires', 0, 'failure', '{}',
      'time', time_text(now), 'throttles', cjson.encode({ NS .. 'q:' .. next_queue }))
    history(jid, now, 'put', { q = next_queue })
    redis.call('zadd', NS .. 'queues', 'NX', now, next_queue)
    promote(next_queue, now)
    if delay > 0 then
      redis.call('hset', key, 'state', 'scheduled')
      add_scheduled(next_queue, jid, now + delay)
    else
      redis.call('hset', key, 'state', 'waiting')
      add_work(next_queue, jid, job.priority, now)
    end
    return 'waiting'
  end
  redis.call('hset', key, 'state', 'complete', 'worker', '', 'expires', 0, 'queue', '',
    'failure', '{}', 'time', time_text(now))
  redis.call('zadd', NS .. 'completed', now, jid)
  release_dependents(jid, now)
  prune_completed(now)
  return 'complete'
end)

-- retry ... DELAY GROUP MESSAGE: counts the attempt and runs the job again
-- after DELAY (0: in its old place), or fails it in GROUP when no retries
-- remain. Answers `waiting`, `scheduled` or `failed`. Without a GROUP
-- (an empty reason), as qless's retry without one: a job that runs again
-- keeps the failure it had, one that fails goes to qless's group
-- `failed-retries-<queue>`, never to a group with no name.
commands.retry = on_lease(function(now, real, job, own)
  local jid, delay, group, message = job.jid, tonumber(own[1]) or 0, own[2] or '', own[3] or ''
  local key = job_key(jid)
  end_lease(job)
  local remaining = (tonumber(job.remaining) or 0) - 1
  redis.call('hset', key, 'remaining', remaining)
  if remaining < 0 then
    local retries_group, retries_message = exhausted(job.queue)
    if group == '' then group = retries_group end
    if message == '' then message = retries_message end
    fail_job(jid, job.queue, job.worker, group, message, now)
    return 'failed'
  end
  count_stat(job.queue, now, 'retries', 1)
  redis.call('hset', key, 'worker', '', 'expires', 0, 'time', time_text(now))
  if group ~= '' then
    redis.call('hset', key, 'failure', cjson.encode({ group = group, message = message,
      when = math.floor(now), worker = job.worker }))
  end
  if delay > 0 then
    redis.call('hset', key, 'state', 'scheduled')
    add_scheduled(job.queue, jid, now + delay)
    return 'scheduled'
  end
  redis.call('hset', key, 'state', 'waiting')
  return_work(job.queue, jid, now)
  return 'waiting'
end)

-- release: hands a held job back uncounted, to its old place.
commands.release = on_lease(function(now, real, job)
  end_lease(job)
  redis.call('hset', job_key(job.jid), 'state', 'waiting', 'worker', '', 'expires', 0)
  return_work(job.queue, job.jid, now)
  return 'waiting'
end)

-- snooze ... DELAY: hands a held job back uncounted (its `remaining`
-- retries unchanged), scheduled to run after DELAY seconds.
commands.snooze = on_lease(function(now, real, job, own)
  local delay = tonumber(own[1])
  if not delay or delay < 0 then return ERR.invalid('a snooze needs a delay in seconds') end
  end_lease(job)
  redis.call('hset', job_key(job.jid), 'state', 'scheduled', 'worker', '', 'expires', 0,
    'time', time_text(now))
  add_scheduled(job.queue, job.jid, now + delay)
  return 'scheduled'
end)

-- abandon: ends a held lease as if it expired now (the attempt counted):
-- what a closing handle does with its leases.
commands.abandon = on_lease(function(now, real, job)
  time_out(job.queue, job.jid, now, now)
  return 'waiting'
end)

-- heartbeat ... LEASE_SECONDS: extends a held lease.
commands.heartbeat = on_lease(function(now, real, job, own)
  local jid, worker = job.jid, job.worker
  local expires = real + tonumber(own[1])
  redis.call('hset', job_key(jid), 'expires', expires)
  redis.call('hdel', job_key(jid), 'grace')
  redis.call('zadd', queue_key(job.queue, 'locks'), expires, jid)
  redis.call('zadd', worker_key(worker), expires, jid)
  redis.call('zadd', NS .. 'workers', now, worker)
  return tostring(expires)
end)

-- fail ... GROUP MESSAGE: fails a held job at once.
commands.fail = on_lease(function(now, real, job, own)
  local group, message = own[1], own[2]
  if group == nil or group == '' then return ERR.invalid('a failure group is needed') end
  end_lease(job)
  redis.call('hdel', job_key(job.jid), 'dque-score')
  fail_job(job.jid, job.queue, job.worker, group, message, now)
  return 'failed'
end)

-- The job `jid` of `queue` (any queue when empty), or nil and the error.
local function job_of_queue(jid, queue)
  local job = load_job(jid)
  if not job or (queue ~= '' and job.queue ~= queue) then return nil, ERR.nojob(jid) end
  return job
end

-- priority JID QUEUE PRIORITY LEASED_OK: a waiting job goes to the end of
-- its new priority; a scheduled or depending one keeps its place. A
-- running job is refused unless LEASED_OK (qless changes it in place).
function commands.priority(now, real, args)
  local jid, queue, priority, leased_ok = args[1], args[2], tonumber(args[3]), args[4] == '1'
  if not priority then return ERR.invalid('a priority is a number') end
  promote(queue, now)
  local job, err = job_of_queue(jid, queue)
  if not job then return err end
  local state = job.state
  if state == 'complete' or state == 'failed' then return ERR.nojob(jid) end
  if state == 'running' and not leased_ok then return ERR.leased(jid) end
  if tonumber(job.priority) == priority then return 'unchanged' end
  redis.call('hset', job_key(jid), 'priority', priority)
  if state == 'waiting' then
    redis.call('zrem', queue_key(job.queue, 'work'), jid)
    add_work(job.queue, jid, priority, now)
  end
  return 'changed'
end

-- runnow JID QUEUE: scheduled job JID of QUEUE is ready now, at the end
-- of its priority (as `promote` moves a due job); its retries are kept.
-- 1 if it waits (a ready job stays as it is), 0 if not.
function commands.runnow(now, real, args)
  local jid, queue = args[1], args[2]
  promote(queue, now)
  local job = job_of_queue(jid, queue)
  if not job then return 0 end
  if job.state == 'waiting' then return 1 end
  if job.state ~= 'scheduled' then return 0 end
  redis.call('zrem', queue_key(queue, 'scheduled'), jid)
  redis.call('hset', job_key(jid), 'state', 'waiting', 'time', time_text(now))
  add_work(queue, jid, job.priority, now)
  return 1
end

-- cancel QUEUE JID...: deletes waiting, scheduled or depending jobs of
-- QUEUE (with no QUEUE: jobs in any state, as qless does): all of them,
-- or none when one is held, is gone, or is a dependency of a job that
-- stays.
function commands.cancel(now, real, args)
  local queue = args[1]
  local ids, doomed = {}, {}
  for i = 2, #args do
    if not doomed[args[i]] then ids[#ids + 1] = args[i] end
    doomed[args[i]] = true
  end
  for _, jid in ipairs(ids) do
    local job, err = job_of_queue(jid, queue)
    if not job then return err end
    -- The Jobs API (a queue named) cancels waiting jobs only; qless's
    -- cancel (no queue) takes a job in any state.
    local settled = job.state == 'complete' or job.state == 'failed'
    if settled and queue ~= '' then return ERR.nojob(jid) end
    if job.state == 'running' and queue ~= '' then return ERR.leased(jid) end
    for _, dependent in ipairs(redis.call('smembers', job_key(jid) .. '-dependents')) do
      if not doomed[dependent] then
        return ERR.invalid('job ' .. jid .. ' is a dependency of ' .. dependent .. ', which stays')
      end
    end
  end
  for _, jid in ipairs(ids) do
    unplace(jid, load_job(jid))
    delete_job(jid)
    -- A cancelled job frees its id (unique.lua).
    redis.call('del', unique_key(jid))
  end
  return #ids
end

-- requeue JID QUEUE: a failed job of QUEUE runs again, its retries
-- restored (qless's put of a failed job).
function commands.requeue(now, real, args)
  local jid, queue = args[1], args[2]
  local job = load_job(jid)
  -- The oldest dead letter of the id first: one set aside for a new job
  -- of its id (aside.lua), which a dead job of the id then replaces there.
  local n = queue ~= '' and aside_number(queue, jid)
  if n then
    if job and ACTIVE[job.state] then
      return ERR.invalid('a job with id "' .. jid .. '" is queued again already')
    elseif job and job.state == 'failed' then
      -- Its hold stays the id's (the id's one key): rare, and it held
      -- the id already.
      set_aside(jid, job, false)
    elseif job then
      unplace(jid, job)
    end
    take_back(n, queue, jid, now)
    job = load_job(jid)
  elseif not (job and job.state == 'failed' and (queue == '' or job.queue == queue)) then
    return ERR.nojob(jid)
  end
  unlist_failed(jid, job)
  redis.call('hset', job_key(jid), 'state', 'waiting', 'remaining', job.retries, 'worker', '',
    'expires', 0, 'time', time_text(now))
  redis.call('hdel', job_key(jid), 'dque-died')
  history(jid, now, 'put', { q = job.queue })
  promote(job.queue, now)
  add_work(job.queue, jid, job.priority, now)
  return 'waiting'
end

-- The failed jobs of `queue`, in the order they failed.
local function failed_of(queue)
  local found = {}
  for _, group in ipairs(redis.call('smembers', NS .. 'failures')) do
    for _, jid in ipairs(redis.call('lrange', NS .. 'f:' .. group, 0, -1)) do
      local job = load_job(jid)
      if job and job.state == 'failed' and job.queue == queue then
        found[#found + 1] = job
      end
    end
  end
  for _, job in ipairs(aside_jobs(queue)) do found[#found + 1] = job end
  -- dque's exact time of death, unless a qless client failed the job
  -- since (its failure's `when`, whole seconds, then disagrees).
  local function died(job)
    local when = tonumber(decode_list(job.failure).when)
    local exact = tonumber(job['dque-died'])
    if exact and (not when or math.floor(exact) == when) then return exact end
    return when or 0
  end
  -- Ties by the order set aside: a dead letter set aside died before
  -- the job that took its id.
  local function aside_order(job) return job.aside or math.huge end
  table.sort(found, function(a, b)
    local da, db = died(a), died(b)
    if da ~= db then return da < db end
    if aside_order(a) ~= aside_order(b) then return aside_order(a) < aside_order(b) end
    return a.jid < b.jid
  end)
  return found
end

-- waiting QUEUE MAX: ready and running jobs in pop order (a running one
-- where it was popped from), then scheduled ones by due time.
function commands.waiting(now, real, args)
  local queue, max = args[1], tonumber(args[2])
  promote(queue, now)
  reclaim(queue, now, real)
  local listed = {}
  if max <= 0 then return listed end
  local ready = redis.call('zrevrange', queue_key(queue, 'work'), 0, max - 1, 'WITHSCORES')
  local entries = {}
  for i = 1, #ready, 2 do
    entries[#entries + 1] = { jid = ready[i], score = tonumber(ready[i + 1]), state = 'waiting' }
  end
  local locks = redis.call('zrange', queue_key(queue, 'locks'), 0, -1, 'WITHSCORES')
  for i = 1, #locks, 2 do
    local jid = locks[i]
    local job = redis.call('hmget', job_key(jid), 'dque-score', 'priority', 'time')
    local score = tonumber(job[1]) or ((tonumber(job[2]) or 0) - (tonumber(job[3]) or 0) / 1e10)
    entries[#entries + 1] = { jid = jid, score = score, state = 'running', at = locks[i + 1] }
  end
  -- Jobs waiting on a full throttle, in the place they come back to.
  for _, jid in ipairs(redis.call('zrange', queue_key(queue, 'throttled'), 0, max - 1)) do
    local job = redis.call('hmget', job_key(jid), 'dque-score', 'priority', 'time')
    local score = tonumber(job[1]) or ((tonumber(job[2]) or 0) - (tonumber(job[3]) or 0) / 1e10)
    entries[#entries + 1] = { jid = jid, score = score, state = 'waiting' }
  end
  table.sort(entries, function(a, b) return a.score > b.score end)
  for _, entry in ipairs(entries) do
    if #listed >= max then return listed end
    listed[#listed + 1] = job_reply(load_job(entry.jid), entry.state, entry.at)
  end
  local left = max - #listed
  if left > 0 then
    local scheduled = redis.call('zrange', queue_key(queue, 'scheduled'), 0, left - 1, 'WITHSCORES')
    for i = 1, #scheduled, 2 do
      listed[#listed + 1] = job_reply(load_job(scheduled[i]), 'scheduled', scheduled[i + 1])
    end
  end
  return listed
end

-- dead QUEUE MAX: the failed jobs of QUEUE, oldest failure first.
function commands.dead(now, real, args)
  local queue, max = args[1], tonumber(args[2])
  local listed = {}
  for _, job in ipairs(failed_of(queue)) do
    if #listed >= max then break end
    listed[#listed + 1] = job_reply(job)
  end
  return listed
end

-- deregister WORKER: forgets a worker that holds no jobs (a closing
-- handle), so qless's list of workers does not grow with every process.
function commands.deregister(now, real, args)
  local worker = args[1]
  if redis.call('zcard', worker_key(worker)) == 0 then
    redis.call('zrem', NS .. 'workers', worker)
    return 1
  end
  return 0
end

-- How many failed jobs `queue` has (qless files failures by group, not by
-- queue: every group is read).
local function failed_count(queue)
  local count = 0
  for _, group in ipairs(redis.call('smembers', NS .. 'failures')) do
    for _, jid in ipairs(redis.call('lrange', NS .. 'f:' .. group, 0, -1)) do
      local job = redis.call('hmget', job_key(jid), 'state', 'queue')
      if job[1] == 'failed' and job[2] == queue then count = count + 1 end
    end
  end
  return count + redis.call('zcard', aside_key(queue))
end

-- counts QUEUE: ready, scheduled, running, failed and depending jobs.
function commands.counts(now, real, args)
  local queue = args[1]
  promote(queue, now)
  reclaim(queue, now, real)
  return {
    -- Jobs waiting on a full throttle are ready, to the Jobs API.
    redis.call('zcard', queue_key(queue, 'work')) + redis.call('zcard', queue_key(queue, 'throttled')),
    redis.call('zcard', queue_key(queue, 'scheduled')),
    redis.call('zcard', queue_key(queue, 'locks')),
    failed_count(queue),
    redis.call('zcard', queue_key(queue, 'depends')),
  }
end

-- leases QUEUE MAX: the jobs whose lock has not ended, soonest end first,
-- each with the last entries of its history (where its last pop is). A
-- read: expired locks are left to the next write's reclaim.
function commands.leases(now, real, args)
  local queue, max = args[1], tonumber(args[2])
  local listed = {}
  if max <= 0 then return listed end
  local locks = redis.call('zrangebyscore', queue_key(queue, 'locks'), real, '+inf',
    'WITHSCORES', 'LIMIT', 0, max)
  for i = 1, #locks, 2 do
    local recent = redis.call('lrange', job_key(locks[i]) .. '-history', -20, -1)
    listed[#listed + 1] = { job_reply(load_job(locks[i]), 'running', locks[i + 1]), recent }
  end
  return listed
end
