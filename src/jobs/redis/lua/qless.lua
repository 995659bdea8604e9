-- qless's own calls, where the Jobs API has none: a job's whole record,
-- tags, dependencies, tracking, failure groups, workers, queue counts and
-- configuration.

-- get JID: the job, its history, dependencies, dependents and whether it
-- is tracked; nil when there is no such job.
function commands.get(now, real, args)
  local jid = args[1]
  local job = load_job(jid)
  if not job then return false end
  local key = job_key(jid)
  return {
    job_reply(job, job.state, job.expires),
    redis.call('lrange', key .. '-history', 0, -1),
    redis.call('smembers', key .. '-dependencies'),
    redis.call('smembers', key .. '-dependents'),
    redis.call('zscore', NS .. 'tracked', jid) and 1 or 0,
  }
end

-- tag add|remove JID TAG...: the job's tags after the change.
function commands.tag(now, real, args)
  local what, jid = args[1], args[2]
  local job = load_job(jid)
  if not job then return ERR.nojob(jid) end
  local tags = decode_list(job.tags)
  local has = {}
  for _, tag in ipairs(tags) do has[tag] = true end
  for i = 3, #args do
    local tag = args[i]
    if what == 'add' and not has[tag] then
      has[tag] = true
      tags[#tags + 1] = tag
      redis.call('zadd', NS .. 't:' .. tag, now, jid)
      redis.call('zincrby', NS .. 'tags', 1, tag)
    elseif what == 'remove' and has[tag] then
      has[tag] = nil
      redis.call('zrem', NS .. 't:' .. tag, jid)
      if tonumber(redis.call('zincrby', NS .. 'tags', -1, tag)) <= 0 then
        redis.call('zrem', NS .. 'tags', tag)
      end
    end
  end
  local kept = {}
  for _, tag in ipairs(tags) do
    if has[tag] then kept[#kept + 1] = tag end
  end
  redis.call('hset', job_key(jid), 'tags', cjson.encode(kept))
  return kept
end

-- tagged TAG OFFSET COUNT: how many jobs have TAG, and a page of them
-- (oldest tagged first).
function commands.tagged(now, real, args)
  local key = NS .. 't:' .. args[1]
  local offset, count = tonumber(args[2]), tonumber(args[3])
  if count <= 0 then return { redis.call('zcard', key), {} } end
  return { redis.call('zcard', key), redis.call('zrange', key, offset, offset + count - 1) }
end

-- depends JID on|off DEP...: adds or removes dependencies of a job that
-- waits on others (qless allows nothing else); with none left it is ready.
function commands.depends(now, real, args)
  local jid, what = args[1], args[2]
  local job = load_job(jid)
  if not job then return ERR.nojob(jid) end
  if job.state ~= 'depends' then
    return ERR.invalid('job ' .. jid .. ' is ' .. job.state .. ', not waiting on dependencies')
  end
  local key = job_key(jid)
  for i = 3, #args do
    local dependency = args[i]
    if what == 'on' then
      local state = redis.call('hget', job_key(dependency), 'state')
      if state and state ~= 'complete' then
        redis.call('sadd', key .. '-dependencies', dependency)
        redis.call('sadd', job_key(dependency) .. '-dependents', jid)
      end
    else
      redis.call('srem', key .. '-dependencies', dependency)
      redis.call('srem', job_key(dependency) .. '-dependents', jid)
    end
  end
  if redis.call('scard', key .. '-dependencies') == 0 then
    promote(job.queue, now)
    redis.call('zrem', queue_key(job.queue, 'depends'), jid)
    redis.call('hset', key, 'state', 'waiting', 'time', time_text(now))
    add_work(job.queue, jid, job.priority, now)
    return 'waiting'
  end
  return 'depends'
end

-- track track|untrack JID, or track (nothing): the tracked jobs.
function commands.track(now, real, args)
  local what, jid = args[1], args[2]
  if what == 'track' then
    if not load_job(jid) then return ERR.nojob(jid) end
    redis.call('zadd', NS .. 'tracked', now, jid)
    return 1
  elseif what == 'untrack' then
    return redis.call('zrem', NS .. 'tracked', jid)
  end
  return redis.call('zrange', NS .. 'tracked', 0, -1)
end

-- failures: each failure group and how many jobs it holds.
function commands.failures(now, real, args)
  local groups = {}
  for _, group in ipairs(redis.call('smembers', NS .. 'failures')) do
    groups[#groups + 1] = { group, redis.call('llen', NS .. 'f:' .. group) }
  end
  return groups
end

-- failed GROUP START LIMIT: how many jobs GROUP holds, and a page of them
-- (the latest failure first, as qless lists them).
function commands.failed(now, real, args)
  local key = NS .. 'f:' .. args[1]
  local start, limit = tonumber(args[2]), tonumber(args[3])
  if limit <= 0 then return { redis.call('llen', key), {} } end
  return { redis.call('llen', key), redis.call('lrange', key, start, start + limit - 1) }
end

-- unfail QUEUE GROUP COUNT: moves up to COUNT jobs of failure GROUP to
-- QUEUE, their retries restored. Answers how many moved.
function commands.unfail(now, real, args)
  local queue, group, count = args[1], args[2], tonumber(args[3])
  if count <= 0 then return 0 end
  local list = NS .. 'f:' .. group
  promote(queue, now)
  local jids = redis.call('lrange', list, -count, -1)
  local moved = 0
  for _, jid in ipairs(jids) do
    local job = load_job(jid)
    redis.call('lrem', list, 0, jid)
    if job and job.state == 'failed' then
      moved = moved + 1
      uncount_failed(job.queue, job.failure, job['dque-died'])
      redis.call('hset', job_key(jid), 'state', 'waiting', 'queue', queue, 'remaining', job.retries,
        'worker', '', 'expires', 0, 'time', time_text(now))
      redis.call('hdel', job_key(jid), 'dque-died')
      history(jid, now, 'put', { q = queue })
      redis.call('zadd', NS .. 'queues', 'NX', now, queue)
      add_work(queue, jid, job.priority, now)
    end
  end
  if redis.call('llen', list) == 0 then redis.call('srem', NS .. 'failures', group) end
  return moved
end

-- workers: each worker seen, with how many jobs it holds and how many of
-- those leases have expired.
function commands.workers(now, real, args)
  local listed = {}
  for _, worker in ipairs(redis.call('zrevrange', NS .. 'workers', 0, -1)) do
    local key = worker_key(worker)
    listed[#listed + 1] = {
      worker,
      redis.call('zcount', key, '(' .. real, '+inf'),
      redis.call('zcount', key, '-inf', real),
    }
  end
  return listed
end

-- worker WORKER: the jobs it holds, and those whose leases have expired.
function commands.worker(now, real, args)
  local key = worker_key(args[1])
  return {
    redis.call('zrangebyscore', key, '(' .. real, '+inf'),
    redis.call('zrangebyscore', key, '-inf', real),
  }
end

-- queue QUEUE: waiting, running, scheduled, depending and stalled jobs
-- (without promoting or reclaiming anything).
function commands.queue(now, real, args)
  local queue = args[1]
  local locks = queue_key(queue, 'locks')
  local stalled = redis.call('zcount', locks, '-inf', real)
  local due = redis.call('zcount', queue_key(queue, 'scheduled'), '-inf', now)
  return {
    redis.call('zcard', queue_key(queue, 'work')) + due,
    redis.call('zcard', locks) - stalled,
    redis.call('zcard', queue_key(queue, 'scheduled')) - due,
    redis.call('zcard', queue_key(queue, 'depends')),
    stalled,
  }
end

-- queues: every queue qless knows, oldest first.
function commands.queues(now, real, args)
  return redis.call('zrange', NS .. 'queues', 0, -1)
end

-- config get NAME | set NAME VALUE | unset NAME | all.
function commands.config(now, real, args)
  local what, name = args[1], args[2]
  local key = NS .. 'config'
  if what == 'get' then
    return redis.call('hget', key, name)
  elseif what == 'set' then
    return redis.call('hset', key, name, args[3])
  elseif what == 'unset' then
    return redis.call('hdel', key, name)
  end
  return redis.call('hgetall', key)
end
