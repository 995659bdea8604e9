-- Enqueue of one job, as Hot::insert_new (src/jobs/postgres/mod.rs) sends it.
WITH told AS MATERIALIZED (SELECT pg_notify('dque_jobs', 'bench'))
INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 1, id, false, priority, body, 1000, ready
FROM told, unnest(ARRAY[md5(random()::text)]::text[], ARRAY[0]::int[], ARRAY['\x0102030405'::bytea]::bytea[], ARRAY[1000]::bigint[])
     WITH ORDINALITY AS t(id, priority, body, ready, n)
ORDER BY n;
