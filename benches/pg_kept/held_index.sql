-- ack_base on table jobsb, whose index on leased rows makes every lease a non-HOT update.
UPDATE dque.jobsb j SET attempts = j.attempts + 1, lease_until = 2000000000000 + 30000, lease_token = nextval('dque.lease_tokens'), started = 2000000000000, worker = 'w',
 wait_day = CASE WHEN j.attempts = 0 AND j.wait_ms IS NULL THEN 20000 ELSE j.wait_day END,
 wait_ms = CASE WHEN j.attempts = 0 AND j.wait_ms IS NULL THEN GREATEST(2000000000000 - j.ready_at, 0) ELSE j.wait_ms END
 WHERE j.seq = (SELECT seq FROM dque.jobsb WHERE qno = 1 AND state = 0 AND ready_at <= 2000000000000 AND (lease_until IS NULL OR lease_until <= 2000000000000)
   AND NOT EXISTS (SELECT 1 FROM dque.queues q WHERE q.qno = 1 AND q.paused) AND NOT EXISTS (SELECT 1 FROM dque.limits l WHERE l.qno = 1)
   ORDER BY priority, ready_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED)
 RETURNING j.seq AS s, j.lease_token AS t \gset
WITH gone AS (DELETE FROM dque.jobsb WHERE seq = :s AND state = 0 AND lease_token = :t AND lease_until > 2000000000000 RETURNING seq, wait_day, wait_ms),
logged AS (INSERT INTO dque.stats_log (queue, day, kind, ms, grp, wait_day, wait_ms) SELECT 'bench', 20000, 1::smallint, 5, NULL, wait_day, wait_ms FROM gone)
SELECT count(*) FROM gone;
