-- enq_base plus the kept count: one UPDATE of the connection's slot in a CTE before the insert (the count is the array's length: insert_new adds all or nothing).
WITH told AS MATERIALIZED (SELECT pg_notify('dque_jobs', 'bench')),
kept AS (UPDATE dque.kept SET waiting = waiting + 1 WHERE qno = 1 AND slot = pg_backend_pid() % 64)
INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 1, id, false, priority, body, 1000, ready
FROM told, unnest(ARRAY[md5(random()::text)]::text[], ARRAY[0]::int[], ARRAY['\x0102030405'::bytea]::bytea[], ARRAY[1000]::bigint[])
     WITH ORDINALITY AS t(id, priority, body, ready, n)
ORDER BY n;
