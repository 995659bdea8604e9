-- enqb_base plus the kept count (one UPDATE of the slot, +100).
WITH told AS MATERIALIZED (SELECT pg_notify('dque_jobs', 'bench')),
kept AS (UPDATE dque.kept SET waiting = waiting + 100 WHERE qno = 1 AND slot = pg_backend_pid() % 64)
INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 1, id, false, priority, body, 1000, ready
FROM told, unnest(ARRAY(SELECT md5(random()::text) FROM generate_series(1,100)), array_fill(0, ARRAY[100]), array_fill('\x0102030405'::bytea, ARRAY[100]), array_fill(1000::bigint, ARRAY[100]))
     WITH ORDINALITY AS t(id, priority, body, ready, n)
ORDER BY n;
