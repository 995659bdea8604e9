-- Concurrency limits and pause (issue 27): a limit is a reqless throttle
-- (`ql:th:<name>`, its `maximum`; locks and pending jobs beside it, see
-- base.lua), a pause is qless's (`ql:paused_queues`). The limits a queue's
-- handles set are listed in `ql:dque:limits:<queue>`.

-- pause QUEUE / resume QUEUE: qless's pause and unpause.
function commands.pause(now, real, args)
  redis.call('sadd', NS .. 'paused_queues', args[1])
  return 1
end

function commands.resume(now, real, args)
  redis.call('srem', NS .. 'paused_queues', args[1])
  return 1
end

-- paused QUEUE: 1 if paused.
function commands.paused(now, real, args)
  return redis.call('sismember', NS .. 'paused_queues', args[1])
end

-- limit_set QUEUE NAME MAX: reqless's throttle.set (no expiry); jobs
-- pending on it come back if it has more room now.
function commands.limit_set(now, real, args)
  local queue, name, max = args[1], args[2], tonumber(args[3])
  if not max or max < 1 then return ERR.invalid('limit ' .. name .. ': a maximum is at least 1') end
  redis.call('hset', throttle_key(name), 'id', name, 'maximum', max)
  redis.call('sadd', dque_key('limits', queue), name)
  release_pending(name)
  return 1
end

-- limit_remove QUEUE NAME: reqless's throttle.delete; 1 if it was set.
-- Its jobs run with no limit: the pending ones come back.
function commands.limit_remove(now, real, args)
  local queue, name = args[1], args[2]
  local was = redis.call('del', throttle_key(name))
  redis.call('srem', dque_key('limits', queue), name)
  while redis.call('zcard', throttle_key(name, 'pending')) > 0 do
    release_pending(name)
  end
  return was
end

-- limits QUEUE: NAME MAX RUNNING triples of the limits set through
-- QUEUE's handles that are still set, by name.
function commands.limits(now, real, args)
  local queue = args[1]
  reclaim(queue, now, real)
  local names = redis.call('smembers', dque_key('limits', queue))
  table.sort(names)
  local listed = {}
  for _, name in ipairs(names) do
    local max = throttle_max(name)
    if max > 0 then
      listed[#listed + 1] = name
      listed[#listed + 1] = max
      listed[#listed + 1] = redis.call('zcard', throttle_key(name, 'locks'))
    end
  end
  return listed
end
