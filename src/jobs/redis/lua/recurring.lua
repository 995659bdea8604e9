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

-- recur_spawn QUEUE MOST: puts the jobs of QUEUE's due recurring jobs
-- that qless clients added (no `dque-spec`), at most MOST, as qless-core's
-- pop and peek do: job `JID-COUNT` (the count the recurring job keeps,
-- which dque's firings count too), put at the tick it was due (its
-- history, its place), its tags, priority, retries, data, klass and
-- throttles the recurring job's. With a backlog B, a recurring job behind
-- by more than B intervals skips to B before now (qless's rule: after a
-- long gap B+1 jobs). The ticks move on in this call, so a tick spawns
-- once whoever pops. dque's own schedules (a `dque-spec`: cron, time
-- zones, catch-up policies) are fired by dque's clients (`recur_fire`),
-- which every dque lease does before its pop. At most SPAWN_MOST jobs a
-- call (the rest at the next). Answers the jobs added.
-- At most this many jobs one call spawns, whatever its count (a pop's
-- count may be a batch's; a job costs about 0.1 ms of the server's time).
local SPAWN_MOST = 1000

function commands.recur_spawn(now, real, args)
  local queue = args[1]
  local most = math.min(tonumber(args[2]) or 0, SPAWN_MOST)
  local recur = queue_key(queue, 'recur')
  local added, spawned = 0, 0
  if most <= 0 then return 0 end
  for _, name in ipairs(redis.call('zrangebyscore', recur, '-inf', now, 'LIMIT', 0, most)) do
    local key = recur_key(name)
    local spec, klass, data, priority, tags, retries, interval, backlog, throttles =
      unpack(redis.call('hmget', key, 'dque-spec', 'klass', 'data', 'priority', 'tags', 'retries',
        'interval', 'backlog', 'throttles'))
    interval, backlog = tonumber(interval) or 0, tonumber(backlog) or 0
    -- A recurring job with no interval would spawn for ever: left alone.
    if not spec and interval > 0 then
      -- qless-core floors the score (it is put at a client's clock plus
      -- the offset); so do whole intervals, whose next score is then past
      -- this one. A fractional interval's next score would fall back
      -- behind it and fire the tick again: its ticks are the scores.
      local tick = tonumber(redis.call('zscore', recur, name))
      if interval % 1 == 0 then tick = math.floor(tick) end
      if backlog > 0 and (now - tick) / interval > backlog then
        tick = tick + math.ceil((now - tick) / interval - backlog) * interval
      end
      while tick <= now and spawned < most do
        spawned = spawned + 1
        local jid = name .. '-' .. redis.call('hincrby', key, 'count', 1)
        local answer = commands.put(tick, real, { 'new', queue, jid, klass or '', data or '{}',
          priority or '0', tags or '[]', '0', retries or '0', '[]', '0', '', '', '0', '0', '0' })
        if answer[1] == 1 then
          added = added + 1
          -- Its place is its tick's, as qless-core puts it: the put's
          -- FIFO by arrival would place it after every job put since.
          redis.call('zadd', queue_key(queue, 'work'), 'XX', (tonumber(priority) or 0) - tick / 1e10, jid)
          redis.call('hset', job_key(jid), 'spawned_from_jid', name)
          if throttles then redis.call('hset', job_key(jid), 'throttles', throttles) end
        end
        tick = tick + interval
        redis.call('zadd', recur, tick, name)
      end
    end
  end
  return added
end

-- qless-core's recurring commands, with its arguments and answers, on the
-- moves above. A recurring job put by them has no `dque-spec`: dque lists
-- it as a qless client's.

-- Whether `text` is JSON.
local function is_json(text)
  return text ~= nil and pcall(cjson.decode, text)
end

-- recur QUEUE JID KLASS DATA interval INTERVAL OFFSET [priority P]
-- [tags JSON] [retries R] [backlog B] [throttles JSON]: adds or replaces recurring job
-- JID, its first job due at now + OFFSET. Answers JID. (`recur.on` too.)
function commands.recur(now, real, args)
  local queue, jid, klass, data, spec = args[1], args[2], args[3], args[4], args[5]
  if not queue or not jid or not klass or not is_json(data) then
    return ERR.invalid('recur: a queue, an id, a klass and JSON data are needed')
  end
  if spec ~= 'interval' then return ERR.invalid('recur: schedule type "' .. tostring(spec) .. '" unknown') end
  local interval, offset = tonumber(args[6]), tonumber(args[7])
  if not interval or interval <= 0 or not offset then
    return ERR.invalid('recur: the interval must be a number above 0, the offset a number')
  end
  if #args % 2 == 0 then return ERR.invalid('recur: options come in name value pairs') end
  local options = {}
  for i = 8, #args, 2 do options[args[i]] = args[i + 1] end
  local priority, retries, backlog = tonumber(options.priority or 0), tonumber(options.retries or 0),
    tonumber(options.backlog or 0)
  local ok, tags = pcall(cjson.decode, options.tags or '{}')
  local ok_throttles, throttles = pcall(cjson.decode, options.throttles or '{}')
  if not priority or not retries or not backlog or not ok or type(tags) ~= 'table'
    or not ok_throttles or type(throttles) ~= 'table' then
    return ERR.invalid('recur: priority, retries and backlog must be numbers, tags and throttles JSON arrays')
  end
  commands.recur_set(now, real, { queue, jid, klass, data, priority, interval, retries, backlog, '', '', now + offset })
  redis.call('hdel', recur_key(jid), 'dque-spec', 'dque-ticks')
  -- reqless's `throttles`: its spawned jobs take them, and the queue's.
  throttles[#throttles + 1] = NS .. 'q:' .. queue
  redis.call('hset', recur_key(jid), 'tags', cjson.encode(tags), 'throttles', cjson.encode(unique(throttles)))
  redis.call('zadd', queue_key(queue, 'recur'), now + offset, jid)
  return jid
end
commands['recur.on'] = commands.recur

-- unrecur JID: stops recurring job JID (none: nothing to do). Answers 1.
-- (`recur.off` too.)
function commands.unrecur(now, real, args)
  local queue = redis.call('hget', recur_key(args[1]), 'queue')
  if queue then commands.recur_del(now, real, { queue, args[1] }) end
  return 1
end
commands['recur.off'] = commands.unrecur

-- recur.get JID: the recurring job as JSON, nil if none.
commands['recur.get'] = function(now, real, args)
  local job = redis.call('hmget', recur_key(args[1]), 'jid', 'klass', 'state', 'queue', 'priority',
    'interval', 'retries', 'count', 'data', 'tags', 'backlog')
  if not job[1] then return false end
  return cjson.encode({
    jid = job[1], klass = job[2], state = job[3], queue = job[4], priority = tonumber(job[5]),
    interval = tonumber(job[6]), retries = tonumber(job[7]), count = tonumber(job[8]), data = job[9],
    tags = decode_list(job[10]), backlog = tonumber(job[11] or 0),
  })
end

local RECUR_NUMBERS = { priority = true, interval = true, retries = true, backlog = true }

-- recur.update JID NAME VALUE...: changes priority, interval (the next
-- run moves by the change), retries, data, klass, queue (the next run
-- kept, its queue throttle swapped) or backlog. All are checked before
-- any is written. Answers 1.
commands['recur.update'] = function(now, real, args)
  local jid = args[1]
  local key = recur_key(jid)
  if redis.call('exists', key) == 0 then return ERR.invalid('recur.update: no recurring job ' .. jid) end
  for i = 2, #args, 2 do
    local name, value = args[i], args[i + 1]
    if value == nil then return ERR.invalid('recur.update: no value for ' .. name) end
    if RECUR_NUMBERS[name] then
      if not tonumber(value) then return ERR.invalid('recur.update: ' .. name .. ' must be a number') end
    elseif name == 'data' then
      if not is_json(value) then return ERR.invalid('recur.update: data must be JSON') end
    elseif name ~= 'klass' and name ~= 'queue' then
      return ERR.invalid('recur.update: unknown option "' .. name .. '"')
    end
  end
  for i = 2, #args, 2 do
    local name, value = args[i], args[i + 1]
    local queue, interval = unpack(redis.call('hmget', key, 'queue', 'interval'))
    if name == 'interval' then
      redis.call('zincrby', queue_key(queue, 'recur'), tonumber(value) - tonumber(interval), jid)
    elseif name == 'queue' then
      local score = redis.call('zscore', queue_key(queue, 'recur'), jid)
      redis.call('zrem', queue_key(queue, 'recur'), jid)
      redis.call('zadd', queue_key(value, 'recur'), score, jid)
      redis.call('zadd', NS .. 'queues', 'NX', now, value)
      -- The queue's own throttle follows it, as reqless's update does.
      local throttles = {}
      for _, tid in ipairs(decode_list(redis.call('hget', key, 'throttles'))) do
        if tid ~= NS .. 'q:' .. queue then throttles[#throttles + 1] = tid end
      end
      throttles[#throttles + 1] = NS .. 'q:' .. value
      redis.call('hset', key, 'throttles', cjson.encode(throttles))
    end
    if RECUR_NUMBERS[name] then value = tonumber(value) end
    redis.call('hset', key, name, value)
  end
  return 1
end

-- recur.tag JID TAG... / recur.untag JID TAG...: the tags after the
-- change, as JSON.
local function retag(jid, add, names)
  local tags = redis.call('hget', recur_key(jid), 'tags')
  if not tags then return ERR.invalid('recur tags: no recurring job ' .. jid) end
  local kept, has = {}, {}
  for _, tag in ipairs(decode_list(tags)) do
    if add or not names[tag] then
      kept[#kept + 1] = tag
      has[tag] = true
    end
  end
  if add then
    for _, tag in ipairs(names) do
      if not has[tag] then
        has[tag] = true
        kept[#kept + 1] = tag
      end
    end
  end
  local text = cjson.encode(kept)
  redis.call('hset', recur_key(jid), 'tags', text)
  return text
end

commands['recur.tag'] = function(now, real, args)
  return retag(args[1], true, { unpack(args, 2) })
end

commands['recur.untag'] = function(now, real, args)
  local names = {}
  for i = 2, #args do names[args[i]] = true end
  return retag(args[1], false, names)
end
