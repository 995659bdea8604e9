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
-- is set aside in its turn).

local function aside_key(queue) return NS .. 'dque-aside:' .. queue end
local function aside_job_key(n) return NS .. 'dque-aside-job:' .. n end

-- Sets the dead letter `job` (failed, its id `jid`) aside.
local function set_aside(jid, job)
  local n = redis.call('incr', NS .. 'dque-aside-seq')
  redis.call('hset', aside_job_key(n), unpack(redis.call('hgetall', job_key(jid))))
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

-- Puts dead letter `n` of `queue` back under its id `jid` (whose key the
-- caller freed), failed and in no failure group: the caller requeues it.
local function take_back(n, queue, jid)
  local key = aside_job_key(n)
  redis.call('del', job_key(jid))
  redis.call('hset', job_key(jid), unpack(redis.call('hgetall', key)))
  redis.call('del', key)
  redis.call('zrem', aside_key(queue), n)
end
