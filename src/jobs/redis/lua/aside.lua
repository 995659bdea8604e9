-- Dead letters set aside. A job's id is its key, so a put of a dead
-- letter's id would replace the dead letter; dque's enqueue (`put new`)
-- instead keeps it beside the new job, as the embedded queue and
-- PostgreSQL do: its hash moves to `ql:dque-aside-job:<n>` (n from the
-- counter `ql:dque-aside-seq`), listed in its queue's zset
-- `ql:dque-aside:<queue>` (scored by n, the order set aside). It stays
-- the queue's dead letter (`dead`, `counts`, its day's `failed` count)
-- but leaves its qless failure group: qless clients see the new job
-- under the id. Its requeue is refused while the id is taken, and takes
-- it back under its id once the new job is done (or dead: then that one
-- is set aside in its turn). Each dead letter set aside keeps a copy of
-- its history (`ql:dque-aside-job:<n>-history`): the id's own list goes
-- on with the new job, and goes with it when it is cancelled or pruned.

local function aside_key(queue) return NS .. 'dque-aside:' .. queue end
local function aside_job_key(n) return NS .. 'dque-aside-job:' .. n end
local function aside_history_key(n) return aside_job_key(n) .. '-history' end

-- Appends the entries of list `from` to list `to` (a page at a time: a
-- long history must not overflow Lua's stack).
local function copy_list(from, to)
  local len = redis.call('llen', from)
  for i = 0, len - 1, 100 do
    redis.call('rpush', to, unpack(redis.call('lrange', from, i, i + 99)))
  end
end

-- Sets the dead letter `job` (failed, its id `jid`) aside. With
-- `move_hold` (a new job takes the id) the id's unique hold is the
-- letter's and goes with it (`dque-hold`): the new job holds only what
-- it asks for, and the letter gets its hold back if it is requeued
-- within the period.
local function set_aside(jid, job, move_hold)
  local n = redis.call('incr', NS .. 'dque-aside-seq')
  redis.call('hset', aside_job_key(n), unpack(redis.call('hgetall', job_key(jid))))
  copy_list(job_key(jid) .. '-history', aside_history_key(n))
  local hold = move_hold and redis.call('get', unique_key(jid))
  if hold then
    redis.call('hset', aside_job_key(n), 'dque-hold', hold)
    redis.call('del', unique_key(jid))
  end
  redis.call('zadd', aside_key(job.queue), n, n)
  leave_group(jid, job)
end

-- The dead letters set aside in `queue`, oldest first, as jobs.
local function aside_jobs(queue)
  local found = {}
  for _, n in ipairs(redis.call('zrange', aside_key(queue), 0, -1)) do
    local values = redis.call('hmget', aside_job_key(n), unpack(FIELDS))
    local job = {}
    for i, name in ipairs(FIELDS) do job[name] = values[i] end
    job.aside = tonumber(n)
    found[#found + 1] = job
  end
  return found
end

-- The number of the oldest dead letter of id `jid` set aside in `queue`.
local function aside_number(queue, jid)
  for _, n in ipairs(redis.call('zrange', aside_key(queue), 0, -1)) do
    if redis.call('hget', aside_job_key(n), 'jid') == jid then return n end
  end
  return nil
end

-- The newest dead letter of id `jid` set aside in `queue`, as a job (nil
-- if none).
local function newest_aside(queue, jid)
  local numbers = redis.call('zrevrange', aside_key(queue), 0, -1)
  for _, n in ipairs(numbers) do
    if redis.call('hget', aside_job_key(n), 'jid') == jid then
      local values = redis.call('hmget', aside_job_key(n), unpack(FIELDS))
      local job = {}
      for i, name in ipairs(FIELDS) do job[name] = values[i] end
      job.aside = tonumber(n)
      return job
    end
  end
  return nil
end

-- Lists `jid` in qless's tag index under each tag of `tags` (JSON), or
-- (`add` false) takes it off them; a tag's count moves only when the
-- listing did.
local function index_tags(jid, tags, add, now)
  for _, tag in ipairs(decode_list(tags)) do
    if add then
      if redis.call('zadd', NS .. 't:' .. tag, now, jid) == 1 then
        redis.call('zincrby', NS .. 'tags', 1, tag)
      end
    elseif redis.call('zrem', NS .. 't:' .. tag, jid) == 1 then
      if tonumber(redis.call('zincrby', NS .. 'tags', -1, tag)) <= 0 then
        redis.call('zrem', NS .. 'tags', tag)
      end
    end
  end
end

-- Puts dead letter `n` of `queue` back under its id `jid` (whose key the
-- caller freed), failed and in no failure group, with its own history
-- and tags (the index lists the id under the letter's tags, no longer
-- under those of the job it replaces): the caller requeues it.
local function take_back(n, queue, jid, now)
  local key = aside_job_key(n)
  index_tags(jid, redis.call('hget', job_key(jid), 'tags'), false, now)
  redis.call('del', job_key(jid), job_key(jid) .. '-history')
  redis.call('hset', job_key(jid), unpack(redis.call('hgetall', key)))
  index_tags(jid, redis.call('hget', job_key(jid), 'tags'), true, now)
  -- Its unique hold, if still in its period and the id holds no other.
  local hold = redis.call('hget', key, 'dque-hold')
  redis.call('hdel', job_key(jid), 'dque-hold')
  local until_ms = hold and tonumber(string.match(hold, '^(%d+):'))
  if until_ms and until_ms > now * 1000 and redis.call('exists', unique_key(jid)) == 0 then
    redis.call('set', unique_key(jid), hold, 'PX', math.max(1, math.ceil(until_ms - now * 1000)))
  end
  if redis.call('exists', aside_history_key(n)) == 1 then
    redis.call('rename', aside_history_key(n), job_key(jid) .. '-history')
  end
  redis.call('del', key)
  redis.call('zrem', aside_key(queue), n)
end
