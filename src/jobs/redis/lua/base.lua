-- dque's job scripts over qless's data model (written for dque from the
-- data model and the observed behaviour of qless-py 0.11.4 and reqless
-- 0.13.3; no qless-core code). One script, loaded once and called by SHA:
-- ARGV[1] is the command, ARGV[2] the client's clock (Unix seconds, a
-- float: due times, statistics, history, `time`), ARGV[3] the client's
-- system time (lease deadlines), the rest the command's own. Each call runs
-- atomically in Redis.
--
-- This part: key names, the work score, statistics, history, and the
-- moves every command shares.

local NS = 'ql:'

local function job_key(jid) return NS .. 'j:' .. jid end
local function queue_key(queue, part) return NS .. 'q:' .. queue .. '-' .. part end
local function worker_key(worker) return NS .. 'w:' .. worker .. ':jobs' end
-- dque's own keys (qless clients never read them).
local function dque_key(part, queue) return NS .. 'dque:' .. part .. ':' .. queue end

-- Job states whose id a caller's enqueue must not add again.
local ACTIVE = { waiting = true, scheduled = true, running = true, depends = true, stalled = true,
  throttled = true }

local DAY = 86400

local function day_of(now) return math.floor(now / DAY) * DAY end

-- The `time` field: qless writes the float with 20 decimals.
local function time_text(now) return string.format('%.20f', now) end

local function decode_list(text)
  if not text or text == '' then return {} end
  local ok, value = pcall(cjson.decode, text)
  if ok and type(value) == 'table' then return value end
  return {}
end

-- The histogram bucket qless files a duration under.
local function bucket(seconds)
  local s = math.floor(seconds)
  if s < 0 then s = 0 end
  if s < 60 then return 's' .. s end
  if s < 3600 then return 'm' .. math.floor(s / 60) end
  if s < DAY then return 'h' .. math.floor(s / 3600) end
  return 'd' .. math.min(math.floor(s / DAY), 7)
end

-- Adds one duration to the day's `wait` or `run` record (Welford's
-- running mean and sum of squares, as qless keeps them).
local function record_duration(kind, queue, now, seconds)
  if seconds < 0 then seconds = 0 end
  local key = NS .. 's:' .. kind .. ':' .. day_of(now) .. ':' .. queue
  local old = redis.call('hmget', key, 'total', 'mean', 'vk')
  local count = (tonumber(old[1]) or 0) + 1
  local mean = tonumber(old[2]) or 0
  local vk = tonumber(old[3]) or 0
  local next_mean = mean + (seconds - mean) / count
  vk = vk + (seconds - next_mean) * (seconds - mean)
  redis.call('hset', key, 'total', count, 'mean', next_mean, 'vk', vk)
  redis.call('hincrby', key, bucket(seconds), 1)
end

local function count_stat(queue, now, field, by)
  redis.call('hincrby', NS .. 's:stats:' .. day_of(now) .. ':' .. queue, field, by)
end

local function config_number(name, default)
  return tonumber(redis.call('hget', NS .. 'config', name)) or default
end

-- Appends to a job's history, keeping the last `max-job-history` entries
-- (reqless's setting, 100 by default): a caller id enqueued daily would
-- otherwise grow its list for ever.
local function history(jid, now, what, detail)
  local entry
  if detail then
    entry = { math.floor(now), what, detail }
  else
    entry = { math.floor(now), what }
  end
  local key = job_key(jid) .. '-history'
  local len = redis.call('rpush', key, cjson.encode(entry))
  -- The first entry (the job's first put) stays, as reqless keeps it.
  local keep = config_number('max-job-history', 100)
  if keep > 1 and len > keep then
    local first = redis.call('lindex', key, 0)
    redis.call('ltrim', key, -(keep - 1), -1)
    redis.call('lpush', key, first)
  end
end

-- Puts `jid` on its queue's work set, ready as of time `t`. The score is
-- qless's (priority minus time / 1e10; the highest is popped first). Two
-- jobs of one priority must not share a score (ties pop in reverse order
-- of their ids), and the larger the priority the coarser the time a score
-- resolves (about |priority| * 2.2e-6 s): a time closer than one step
-- after the last one given at this priority moves one step past it. FIFO
-- within a priority, even for jobs enqueued in one call.
local function add_work(queue, jid, priority, t)
  local p = tonumber(priority) or 0
  local last_key = dque_key('last', queue)
  local last = tonumber(redis.call('hget', last_key, tostring(p)))
  -- A step the score still resolves (a double's relative precision).
  local step = (math.abs(p) + 1) * 5e-6
  if last and t < last + step then
    t = last + step
  end
  redis.call('hset', last_key, tostring(p), t)
  local score = p - t / 1e10
  redis.call('zadd', queue_key(queue, 'work'), score, jid)
  return score
end

-- Puts `jid` back where it was popped from (its old score, kept by dque's
-- pop), so a job handed back goes before newer jobs of its priority;
-- unless its priority changed meanwhile (a qless client may change a
-- running job's), which the old score would undo: then it goes to the end
-- of its new priority, as of `at`.
local function return_work(queue, jid, at)
  local job = redis.call('hmget', job_key(jid), 'priority', 'dque-score', 'dque-prio')
  local score = tonumber(job[2])
  if score and job[3] == job[1] then
    redis.call('zadd', queue_key(queue, 'work'), score, jid)
  else
    add_work(queue, jid, job[1], at)
  end
end

-- Puts `jid` on its queue's schedule, due at `at`, numbered so that jobs
-- due at one time fall due in the order they were scheduled (the sorted
-- set alone would order them by id).
local function add_scheduled(queue, jid, at)
  local seq = redis.call('hincrby', dque_key('last', queue), 'scheduled', 1)
  redis.call('hset', job_key(jid), 'dque-seq', seq)
  redis.call('zadd', queue_key(queue, 'scheduled'), at, jid)
end

-- --- limits (issue 27): reqless's throttles ---

-- The client's clock of this call (set by main.lua), for the moves a
-- lock's release makes.
local NOW = 0

local function throttle_key(tid, part)
  if part then return NS .. 'th:' .. tid .. '-' .. part end
  return NS .. 'th:' .. tid
end

-- A throttle's maximum: 0 (or none set) holds any number.
local function throttle_max(tid)
  return tonumber(redis.call('hget', throttle_key(tid), 'maximum')) or 0
end

-- Moves jobs pending on throttle `tid` back to their work sets while it
-- has room (up to 10 when it has no maximum), as reqless's release does;
-- a job dque set aside goes back to its old place.
local function release_pending(tid)
  local pending = throttle_key(tid, 'pending')
  if redis.call('zcard', pending) == 0 then return end
  local max, room = throttle_max(tid), 10
  if max > 0 then room = max - redis.call('zcard', throttle_key(tid, 'locks')) end
  if room < 1 then return end
  for _, jid in ipairs(redis.call('zrange', pending, 0, room - 1)) do
    redis.call('zrem', pending, jid)
    local job = redis.call('hmget', job_key(jid), 'queue', 'state')
    if job[2] == 'throttled' then
      redis.call('zrem', queue_key(job[1], 'throttled'), jid)
      redis.call('hset', job_key(jid), 'state', 'waiting')
      return_work(job[1], jid, NOW)
    end
  end
end

-- Takes `jid` off throttle `tid` (its lock, or else its place in the
-- pending set), letting pending jobs back in: reqless's release.
local function leave_throttle(tid, jid)
  if redis.call('zrem', throttle_key(tid, 'locks'), jid) == 0 then
    redis.call('zrem', throttle_key(tid, 'pending'), jid)
  end
  release_pending(tid)
end

-- Takes `jid` off every throttle it holds or waits on (`throttles`, its
-- JSON list), letting pending jobs back in.
local function leave_throttles(jid, throttles)
  for _, tid in ipairs(decode_list(throttles)) do leave_throttle(tid, jid) end
end

-- Forgets the lock of a running job: the queue's and the worker's, and
-- reqless's throttle locks.
local function drop_lock(jid, queue, worker, throttles)
  redis.call('zrem', queue_key(queue, 'locks'), jid)
  if worker and worker ~= '' then
    redis.call('zrem', worker_key(worker), jid)
  end
  leave_throttles(jid, throttles)
end

-- qless's failure group and message of a job of `queue` whose retries
-- ran out with no reason given.
local function exhausted(queue)
  return 'failed-retries-' .. queue, 'Job exhausted retries in queue "' .. queue .. '"'
end

-- Makes `jid` a failed job in `group`.
local function fail_job(jid, queue, worker, group, message, now)
  redis.call('hset', job_key(jid),
    'state', 'failed', 'worker', '', 'expires', '',
    'dque-died', time_text(now),
    'failure', cjson.encode({ group = group, message = message, when = math.floor(now), worker = worker }))
  redis.call('lpush', NS .. 'f:' .. group, jid)
  redis.call('sadd', NS .. 'failures', group)
  count_stat(queue, now, 'failures', 1)
  count_stat(queue, now, 'failed', 1)
  count_stat(queue, now, 'dque-failure:' .. group, 1)
  history(jid, now, 'failed', { group = group, worker = worker })
end

-- Takes one off the `failed` count of `queue` (the queue the job failed
-- in) on the day the job failed: qless counts, per day of failure, the
-- jobs that failed that day and are failed still, and finds the day by the
-- failure's `when` as qless-core does (the day a job leaves the failed
-- state must not matter, or the failure's day stays counted for ever and
-- the later day goes below zero). dque's exact time of death stands in
-- for a failure without `when`.
local function uncount_failed(queue, failure, died)
  local when = tonumber(decode_list(failure).when) or tonumber(died)
  if when and queue and queue ~= '' then count_stat(queue, when, 'failed', -1) end
end

-- Takes a failed job off its group's list.
local function leave_group(jid, job)
  local group = decode_list(job.failure).group
  if group then
    local list = NS .. 'f:' .. group
    redis.call('lrem', list, 0, jid)
    if redis.call('llen', list) == 0 then
      redis.call('srem', NS .. 'failures', group)
    end
  end
end

-- Takes a failed job off its group's list and out of its day's `failed`
-- count.
local function unlist_failed(jid, job)
  leave_group(jid, job)
  uncount_failed(job.queue, job.failure, job['dque-died'])
end

-- Moves scheduled jobs whose time has come to the work set, in due order,
-- ready as of their due time.
local function promote(queue, now)
  local scheduled = queue_key(queue, 'scheduled')
  while true do
    local found = redis.call('zrangebyscore', scheduled, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 100)
    if #found == 0 then return end
    local due = {}
    for i = 1, #found, 2 do
      local seq = tonumber(redis.call('hget', job_key(found[i]), 'dque-seq')) or 0
      due[#due + 1] = { jid = found[i], at = tonumber(found[i + 1]), seq = seq }
    end
    table.sort(due, function(a, b)
      if a.at ~= b.at then return a.at < b.at end
      return a.seq < b.seq
    end)
    for _, entry in ipairs(due) do
      local jid, at = entry.jid, entry.at
      redis.call('zrem', scheduled, jid)
      local key = job_key(jid)
      redis.call('hset', key, 'state', 'waiting', 'time', time_text(at))
      add_work(queue, jid, redis.call('hget', key, 'priority'), at)
    end
  end
end

-- Ends the lease of running job `jid` (expired at `at`, or abandoned):
-- the attempt counts, and the job runs again from its old place, or fails
-- when it has no retries left.
local function time_out(queue, jid, now, at)
  local key = job_key(jid)
  local job = redis.call('hmget', key, 'worker', 'remaining', 'throttles', 'dque-score')
  drop_lock(jid, queue, job[1], job[3])
  local remaining = (tonumber(job[2]) or 0) - 1
  redis.call('hset', key, 'remaining', remaining)
  redis.call('hdel', key, 'dque-lease', 'grace')
  history(jid, now, 'timed-out')
  count_stat(queue, now, 'retries', 1)
  if remaining < 0 then
    local group, message = exhausted(queue)
    fail_job(jid, queue, job[1], group, message, now)
  else
    redis.call('hset', key, 'state', 'waiting', 'worker', '', 'expires', 0, 'time', time_text(at))
    return_work(queue, jid, at)
  end
end

-- Whether dque's lease (not a qless client's) holds running job `jid`:
-- dque's lease tokens start with the worker's name and a bar.
local function dque_holds(jid)
  local job = redis.call('hmget', job_key(jid), 'worker', 'dque-lease')
  return job[2] and job[1] and string.sub(job[2], 1, #job[1] + 1) == job[1] .. '|'
end

-- Ends the locks that expired by `real`. A dque lease ends at its
-- deadline (the Jobs API's lease time); a qless client's gets qless's
-- grace period first (`grace-period`, 10 s by default): its lock is moved
-- on by that once, marked `grace`, as its own clients do, so a worker
-- whose heartbeat is late does not lose the job early.
local function reclaim(queue, now, real)
  local locks = queue_key(queue, 'locks')
  local grace = config_number('grace-period', 10)
  local expired = redis.call('zrangebyscore', locks, '-inf', real, 'WITHSCORES')
  for i = 1, #expired, 2 do
    local jid, until_ = expired[i], tonumber(expired[i + 1])
    if grace > 0 and not dque_holds(jid) and not redis.call('hget', job_key(jid), 'grace') then
      redis.call('hset', job_key(jid), 'grace', 1)
      redis.call('zadd', locks, real + grace, jid)
    else
      time_out(queue, jid, now, until_)
    end
  end
end

-- Makes the jobs waiting on `jid` ready when it was their last dependency.
local function release_dependents(jid, now)
  local dependents_key = job_key(jid) .. '-dependents'
  for _, dependent in ipairs(redis.call('smembers', dependents_key)) do
    local key = job_key(dependent)
    redis.call('srem', key .. '-dependencies', jid)
    if redis.call('scard', key .. '-dependencies') == 0 then
      local job = redis.call('hmget', key, 'state', 'queue', 'priority', 'scheduled')
      if job[1] == 'depends' then
        promote(job[2], now)
        redis.call('zrem', queue_key(job[2], 'depends'), dependent)
        -- A qless client's put with a delay and dependencies keeps the due
        -- time in `scheduled` until the last dependency completes.
        local due = tonumber(job[4])
        redis.call('hdel', key, 'scheduled')
        if due and due > now then
          redis.call('hset', key, 'state', 'scheduled')
          add_scheduled(job[2], dependent, due)
        else
          redis.call('hset', key, 'state', 'waiting', 'time', time_text(now))
          add_work(job[2], dependent, job[3], now)
        end
      end
    end
  end
  redis.call('del', dependents_key)
end

-- Deletes a job and every trace of it (its tags, its links).
local function delete_job(jid)
  local key = job_key(jid)
  for _, tag in ipairs(decode_list(redis.call('hget', key, 'tags'))) do
    redis.call('zrem', NS .. 't:' .. tag, jid)
    if tonumber(redis.call('zincrby', NS .. 'tags', -1, tag)) <= 0 then
      redis.call('zrem', NS .. 'tags', tag)
    end
  end
  for _, dependency in ipairs(redis.call('smembers', key .. '-dependencies')) do
    redis.call('srem', job_key(dependency) .. '-dependents', jid)
  end
  redis.call('zrem', NS .. 'completed', jid)
  redis.call('zrem', NS .. 'tracked', jid)
  redis.call('del', key, key .. '-history', key .. '-dependencies', key .. '-dependents')
end

-- Takes `jid` out of whatever set of its queue holds it now.
local function unplace(jid, job)
  local state, queue = job.state, job.queue
  if state == 'waiting' then
    redis.call('zrem', queue_key(queue, 'work'), jid)
  elseif state == 'scheduled' then
    redis.call('zrem', queue_key(queue, 'scheduled'), jid)
  elseif state == 'depends' then
    redis.call('zrem', queue_key(queue, 'depends'), jid)
  elseif state == 'throttled' then
    redis.call('zrem', queue_key(queue, 'throttled'), jid)
    leave_throttles(jid, job.throttles)
  elseif state == 'running' or state == 'stalled' then
    drop_lock(jid, queue, job.worker, job.throttles)
  elseif state == 'failed' then
    unlist_failed(jid, job)
  elseif state == 'complete' then
    redis.call('zrem', NS .. 'completed', jid)
  end
end

-- Drops completed jobs beyond the history limits (qless's
-- `jobs-history` seconds and `jobs-history-count` jobs).
local function prune_completed(now)
  local completed = NS .. 'completed'
  local keep_for = config_number('jobs-history', 7 * DAY)
  local keep_count = config_number('jobs-history-count', 50000)
  local old = redis.call('zrangebyscore', completed, '-inf', now - keep_for, 'LIMIT', 0, 100)
  for _, jid in ipairs(old) do delete_job(jid) end
  local over = redis.call('zcard', completed) - keep_count
  if over > 0 then
    for _, jid in ipairs(redis.call('zrange', completed, 0, math.min(over, 100) - 1)) do
      delete_job(jid)
    end
  end
end

-- A job's fields by name, or nil.
local FIELDS = { 'jid', 'klass', 'state', 'queue', 'worker', 'priority', 'expires', 'retries',
  'remaining', 'data', 'tags', 'failure', 'time', 'throttles', 'dque-body', 'dque-headers',
  'dque-put', 'dque-score', 'dque-lease', 'dque-died', 'dque-made' }

local function load_job(jid)
  local values = redis.call('hmget', job_key(jid), unpack(FIELDS))
  if not values[1] and not values[3] then return nil end
  local job = {}
  for i, name in ipairs(FIELDS) do job[name] = values[i] end
  job.jid = jid
  return job
end

-- What the Rust side reads of a job: an array in a fixed order (see
-- `JobReply` in reply.rs). `state` may be overridden (a due job listed
-- as ready); `at` is the due time or lease deadline.
local function job_reply(job, state, at)
  return {
    job.jid, job.data or '', job['dque-body'] or false, job['dque-headers'] or false,
    job.klass or '', job.priority or '0', job.retries or '0', job.remaining or '0',
    job['dque-put'] or job.time or '0', state or job.state or '', tostring(at or ''),
    job.failure or '', job.queue or '', job.worker or '', job.tags or '{}', job['dque-lease'] or '',
    job['dque-made'] and 1 or 0,
  }
end

local ERR = {
  nojob = function(jid) return redis.error_reply('DQUE-NOJOB ' .. jid) end,
  leased = function(jid) return redis.error_reply('DQUE-LEASED ' .. jid) end,
  lost = function(jid) return redis.error_reply('DQUE-LOST ' .. jid) end,
  invalid = function(why) return redis.error_reply('DQUE-INVALID ' .. why) end,
}

-- The job `jid` if `worker` holds its lease `token` (any lease of this
-- worker when `token` is empty) and the lease has not expired; else nil
-- and the error to answer.
local function held_job(jid, queue, worker, token, real)
  local job = load_job(jid)
  if not job then return nil, ERR.nojob(jid) end
  if job.state ~= 'running' or job.worker ~= worker or (queue ~= '' and job.queue ~= queue)
    or (token ~= '' and job['dque-lease'] ~= token)
    or (tonumber(job.expires) or 0) < real then
    return nil, ERR.lost(jid)
  end
  return job
end
