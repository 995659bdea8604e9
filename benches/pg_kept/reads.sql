-- The counts' reads on queue 2 (1 000 000 ready, 1 000 scheduled, 1 000 dead, 10 leased): psql -f.
\timing on
\echo == today: counts() statement
SELECT count(*) FILTER (WHERE state = 0 AND ready_at <= 2000000000000 AND (lease_until IS NULL OR lease_until <= 2000000000000)),
       count(*) FILTER (WHERE state = 0 AND ready_at > 2000000000000),
       count(*) FILTER (WHERE state = 0 AND lease_until > 2000000000000),
       count(*) FILTER (WHERE state = 2) FROM dque.jobs WHERE qno = 2;
\echo == kept: waiting, dead, completed
SELECT sum(waiting), sum(dead), sum(completed) FROM dque.kept WHERE qno = 2;
\echo == scheduled: per priority, an index range of the rows due later
WITH RECURSIVE p AS (
  (SELECT priority FROM dque.jobs WHERE qno = 2 AND state < 2 ORDER BY priority LIMIT 1)
  UNION ALL
  SELECT (SELECT priority FROM dque.jobs WHERE qno = 2 AND state < 2 AND priority > p.priority ORDER BY priority LIMIT 1)
  FROM p WHERE p.priority IS NOT NULL)
SELECT sum((SELECT count(*) FROM dque.jobs WHERE qno = 2 AND state < 2 AND priority = p.priority AND ready_at > 2000000000000))
FROM p WHERE priority IS NOT NULL;
\echo == scheduled: one condition (what the planner does without the per-priority walk)
SELECT count(*) FROM dque.jobs WHERE qno = 2 AND state < 2 AND ready_at > 2000000000000;
\echo == leased: no index holds lease_until
SELECT count(*) FROM dque.jobs WHERE qno = 2 AND state = 0 AND lease_until > 2000000000000;
\echo == stats(): waits kept in live rows (no index holds wait_ms)
SELECT count(*) FROM dque.jobs WHERE qno = 2 AND state = 0 AND wait_ms IS NOT NULL;
