-- enq_base plus the kept count as an upsert after the insert (RETURNING, then INSERT .. ON CONFLICT): slower than enq_kept.
WITH told AS MATERIALIZED (SELECT pg_notify('dque_jobs', 'bench')),
added AS (INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 1, id, false, priority, body, 1000, ready
FROM told, unnest(ARRAY[md5(random()::text)]::text[], ARRAY[0]::int[], ARRAY['\x0102030405'::bytea]::bytea[], ARRAY[1000]::bigint[])
     WITH ORDINALITY AS t(id, priority, body, ready, n)
ORDER BY n RETURNING 1),
kept AS (INSERT INTO dque.kept AS k (qno, slot, waiting) SELECT 1, pg_backend_pid() % 64, count(*) FROM added
         ON CONFLICT (qno, slot) DO UPDATE SET waiting = k.waiting + EXCLUDED.waiting)
SELECT 1;
