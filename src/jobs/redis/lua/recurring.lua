-- Recurring jobs (issue 27): schedules are qless recurring jobs, so qless
-- clients list and fire them too: the hash `ql:r:<name>` (qless's fields,
-- plus dque's `dque-spec`, the schedule as JSON, and `dque-ticks`, what
-- places its ticks) and the zset `ql:q:<queue>-recur`, scored by the next
-- tick. dque computes the ticks (cron, time zones) in the client; a
-- firing is a compare-and-set on the score, in the one script call that
-- puts the tick's jobs.

local function recur_key(name) return NS .. 'r:' .. name end

-- recur_set QUEUE NAME KLASS DATA PRIORITY INTERVAL RETRIES BACKLOG SPEC
-- TICKS NEXT: adds or replaces schedule NAME; its next tick is kept if
-- TICKS is unchanged. Returns the next tick.
function commands.recur_set(now, real, args)
  local queue, name = args[1], args[2]
  local key = recur_key(name)
  local old_queue, old_ticks, count = unpack(redis.call('hmget', key, 'queue', 'dque-ticks', 'count'))
  local next = args[11]
  if old_queue then
    local score = redis.call('zscore', queue_key(old_queue, 'recur'), name)
    if old_ticks == args[10] and score then next = score end
    redis.call('zrem', queue_key(old_queue, 'recur'), name)
  end
  redis.call('hset', key, 'jid', name, 'klass', args[3], 'data', args[4], 'priority', args[5],
    'tags', '{}', 'state', 'recur', 'queue', queue, 'type', 'interval', 'count', count or 0,
    'interval', args[6], 'retries', args[7], 'backlog', args[8],
    'throttles', cjson.encode({ NS .. 'q:' .. queue }), 'dque-spec', args[9], 'dque-ticks', args[10])
  redis.call('zadd', queue_key(queue, 'recur'), next, name)
  redis.call('zadd', NS .. 'queues', 'NX', now, queue)
  return tostring(next)
end

-- recur_del QUEUE NAME: removes schedule NAME of QUEUE; 1 if there was one.
function commands.recur_del(now, real, args)
  local queue, name = args[1], args[2]
  if redis.call('zrem', queue_key(queue, 'recur'), name) == 0 then return 0 end
  redis.call('del', recur_key(name))
  return 1
end

-- recur_list QUEUE: each schedule of QUEUE as [name, next, spec, klass,
-- data, priority, interval, backlog] (a qless client's has no spec).
function commands.recur_list(now, real, args)
  local listed = redis.call('zrange', queue_key(args[1], 'recur'), 0, -1, 'WITHSCORES')
  local out = {}
  for i = 1, #listed, 2 do
    local name = listed[i]
    local fields = redis.call('hmget', recur_key(name), 'dque-spec', 'klass', 'data', 'priority',
      'interval', 'backlog')
    out[#out + 1] = { name, listed[i + 1], fields[1] or '', fields[2] or '', fields[3] or '',
      fields[4] or '0', fields[5] or '0', fields[6] or '0' }
  end
  return out
end

-- recur_fire QUEUE NAME EXPECTED NEXT INTERVAL then put's fields of the
-- tick's jobs: if NAME's next tick is still EXPECTED, puts the jobs (as
-- `put new`) and moves the tick to NEXT (and the qless interval to
-- INTERVAL, the gap after it). Returns the jobs added, or -1 if another
-- client fired it first.
function commands.recur_fire(now, real, args)
  local queue, name = args[1], args[2]
  local score = redis.call('zscore', queue_key(queue, 'recur'), name)
  if not score or math.abs(tonumber(score) - tonumber(args[3])) > 0.0005 then return -1 end
  local put = { 'new', queue }
  for i = 6, #args do put[#put + 1] = args[i] end
  local added = 0
  if #put > 2 then
    local answers = commands.put(now, real, put)
    for i, one in ipairs(answers) do
      added = added + one
      if one == 1 then
        redis.call('hset', job_key(put[3 + (i - 1) * PUT_FIELDS]), 'spawned_from_jid', name)
      end
    end
    redis.call('hincrby', recur_key(name), 'count', added)
  end
  redis.call('zadd', queue_key(queue, 'recur'), args[4], name)
  redis.call('hset', recur_key(name), 'interval', args[5])
  return added
end
