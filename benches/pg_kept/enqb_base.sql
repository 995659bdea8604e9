-- Enqueue of a batch of 100 jobs (Hot::insert_new).
WITH told AS MATERIALIZED (SELECT pg_notify('dque_jobs', 'bench'))
INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 1, id, false, priority, body, 1000, ready
FROM told, unnest(ARRAY(SELECT md5(random()::text) FROM generate_series(1,100)), array_fill(0, ARRAY[100]), array_fill('\x0102030405'::bytea, ARRAY[100]), array_fill(1000::bigint, ARRAY[100]))
     WITH ORDINALITY AS t(id, priority, body, ready, n)
ORDER BY n;
