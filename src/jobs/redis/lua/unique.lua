-- Unique jobs (issue 27): a caller id held for a period after enqueue.
-- `ql:dque-unique:<jid>` holds `UNTIL_MS:STATES` (the period's end in
-- Unix milliseconds, the states as bits: 1 queued, 2 running, 4 done,
-- 8 dead), set by the put that added the job, expiring (PX) with the
-- period; the script's time decides, the expiry only cleans up. The job's
-- own state says whether the hold covers it: a waiting job holds its id
-- anyway; a complete one (or one whose history was pruned) is done; a
-- failed one is dead. A cancel frees the id.

local function unique_key(jid) return NS .. 'dque-unique:' .. jid end

-- The answer of a put of `jid` held by its earlier job `old` (nil if
-- gone): `done:UNTIL` or `dead:UNTIL`, or nil if the id is free at `now`.
local function unique_held(jid, old, now)
  local value = redis.call('get', unique_key(jid))
  if not value then return nil end
  local until_ms, states = string.match(value, '^(%d+):(%d+)$')
  until_ms, states = tonumber(until_ms), tonumber(states)
  if not until_ms or now * 1000 >= until_ms then return nil end
  local state, mask = 'done', 4
  if old and old.state == 'failed' then state, mask = 'dead', 8 end
  if bit.band(states, mask) == 0 then return nil end
  return state .. ':' .. string.format('%d', until_ms)
end

-- Notes that `jid`, put at `now`, holds its id until `until_ms` in `states`.
local function unique_hold(jid, until_ms, states, now)
  local left = math.max(1, math.ceil(until_ms - now * 1000))
  redis.call('set', unique_key(jid), string.format('%d:%d', until_ms, states), 'PX', left)
end
