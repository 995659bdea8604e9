-- Job history (issue 27): one job's record for the Jobs API's job_info.

-- job_info JID: as qless's get (the job, its history), with a scheduled
-- job's due time as its `at` (qless keeps it in the queue's scheduled
-- set, not in the job); nil when there is no such job.
function commands.job_info(now, real, args)
  local jid = args[1]
  local job = load_job(jid)
  if not job then return false end
  local at = job.expires
  if job.state == 'scheduled' and job.queue and job.queue ~= '' then
    at = redis.call('zscore', queue_key(job.queue, 'scheduled'), jid) or at
  end
  return { job_reply(job, job.state, at), redis.call('lrange', job_key(jid) .. '-history', 0, -1) }
end
