-- Concurrency limits and pause (issue 27): a limit is a reqless throttle
-- (`ql:th:<name>`, its `maximum`; locks and pending jobs beside it, see
-- base.lua), a pause is qless's (`ql:paused_queues`). The limits a queue's
-- handles set are listed in `ql:dque:limits:<queue>`.

-- pause QUEUE... / unpause QUEUE...: qless's pause and unpause (no
-- answer); dque's resume is unpause.
function commands.pause(now, real, args)
  if #args > 0 then redis.call('sadd', NS .. 'paused_queues', unpack(args)) end
end

function commands.unpause(now, real, args)
  if #args > 0 then redis.call('srem', NS .. 'paused_queues', unpack(args)) end
end
commands.resume = commands.unpause

-- paused QUEUE: 1 if paused.
function commands.paused(now, real, args)
  return redis.call('sismember', NS .. 'paused_queues', args[1])
end

-- Sets throttle NAME's maximum (0: any number), expiring after TTL
-- seconds if TTL > 0; jobs pending on it come back if it has more room.
local function set_throttle(name, max, ttl)
  redis.call('hset', throttle_key(name), 'id', name, 'maximum', max)
  if ttl > 0 then redis.call('expire', throttle_key(name), ttl) end
  release_pending(name)
end

-- Deletes throttle NAME; its jobs run with no limit: the pending ones come
-- back. 1 if it was set.
local function delete_throttle(name)
  local was = redis.call('del', throttle_key(name))
  while redis.call('zcard', throttle_key(name, 'pending')) > 0 do
    release_pending(name)
  end
  return was
end

-- A JSON array, `[]` when empty (cjson writes an empty table `{}`).
local function json_array(list)
  if #list == 0 then return '[]' end
  return cjson.encode(list)
end

-- limit_set QUEUE NAME MAX: reqless's throttle.set (no expiry).
function commands.limit_set(now, real, args)
  local queue, name, max = args[1], args[2], tonumber(args[3])
  if not max or max < 1 then return ERR.invalid('limit ' .. name .. ': a maximum is at least 1') end
  set_throttle(name, max, 0)
  redis.call('sadd', dque_key('limits', queue), name)
  return 1
end

-- limit_remove QUEUE NAME: reqless's throttle.delete; 1 if it was set.
function commands.limit_remove(now, real, args)
  local queue, name = args[1], args[2]
  redis.call('srem', dque_key('limits', queue), name)
  return delete_throttle(name)
end

-- reqless's throttle commands, with its arguments and answers.
-- throttle.set TID MAX [EXPIRATION]: no answer.
commands['throttle.set'] = function(now, real, args)
  local max, ttl = tonumber(args[2]), tonumber(args[3] or 0)
  if not max or max < 0 or not ttl then
    return ERR.invalid('throttle.set: the maximum and the expiration must be numbers, the maximum at least 0')
  end
  set_throttle(args[1], max, ttl)
end

-- throttle.get TID: JSON {id, maximum (0 when unset), ttl}.
commands['throttle.get'] = function(now, real, args)
  local tid = args[1]
  return cjson.encode({ id = tid, maximum = throttle_max(tid), ttl = redis.call('ttl', throttle_key(tid)) })
end

-- throttle.delete TID: no answer.
commands['throttle.delete'] = function(now, real, args)
  delete_throttle(args[1])
end

-- throttle.locks TID / throttle.pending TID: JSON arrays of job ids.
commands['throttle.locks'] = function(now, real, args)
  return json_array(redis.call('zrange', throttle_key(args[1], 'locks'), 0, -1))
end

commands['throttle.pending'] = function(now, real, args)
  return json_array(redis.call('zrange', throttle_key(args[1], 'pending'), 0, -1))
end

-- throttle.release TID JID...: takes each job's lock (or pending place)
-- off the throttle, letting pending jobs back in; no answer.
commands['throttle.release'] = function(now, real, args)
  for i = 2, #args do leave_throttle(args[1], args[i]) end
end

-- throttle.ttl TID: the throttle's TTL (-1 none, -2 no throttle).
commands['throttle.ttl'] = function(now, real, args)
  return redis.call('ttl', throttle_key(args[1]))
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
