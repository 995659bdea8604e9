-- Job history (issue 27): one job's record for the Jobs API's job_info.

-- job_info JID [QUEUE]: as qless's get (the job, its history, false when
-- there is no such job), with a scheduled job's due time as its `at`
-- (qless keeps it in the queue's scheduled set, not in the job); then,
-- with a QUEUE, the newest dead letter of JID set aside in QUEUE
-- (aside.lua) and its own history, or false: the id's job when the job
-- under the id is not QUEUE's (cancelled, pruned, or another queue's).
function commands.job_info(now, real, args)
  local jid, queue = args[1], args[2]
  local job = load_job(jid)
  local found = false
  if job then
    local at = job.expires
    if job.state == 'scheduled' and job.queue and job.queue ~= '' then
      at = redis.call('zscore', queue_key(job.queue, 'scheduled'), jid) or at
    end
    found = { job_reply(job, job.state, at), redis.call('lrange', job_key(jid) .. '-history', 0, -1) }
  end
  if not queue then return found end
  local aside = newest_aside(queue, jid)
  if not aside then return { found, false } end
  return { found, { job_reply(aside), redis.call('lrange', aside_history_key(aside.aside), 0, -1) } }
end
