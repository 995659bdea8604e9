-- queue 1 (`bench`): 600 000 ready jobs, leased and acked by the worker scripts.
INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 1, 'p' || g, false, 0, '\x0102030405', 1000, 1000 FROM generate_series(1, 600000) g;
-- queue 2 (`big`), as benches/web.rs fills it: 1 000 000 ready, 1 000
-- scheduled, 1 000 dead, 10 leased (with a wait kept in the row).
INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 2, 'r' || g, false, 0, '\x0102030405', 1000, 1000 + g FROM generate_series(1, 1000000) g;
INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 2, 's' || g, false, 0, '\x0102030405', 1000, 3000000000000 FROM generate_series(1, 1000) g;
INSERT INTO dque.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at, state, died, reason)
SELECT 2, 'd' || g, false, 0, '\x0102030405', 1000, 1000, 2, g, 'boom' FROM generate_series(1, 1000) g;
UPDATE dque.jobs SET lease_until = 2000000000000 + 30000, lease_token = seq, attempts = 1,
    wait_day = 1, wait_ms = 5
WHERE qno = 2 AND id IN (SELECT 'r' || g FROM generate_series(1, 10) g);
UPDATE dque.kept SET waiting = 1001000, dead = 1000 WHERE qno = 2 AND slot = 0;
-- Two twin tables for the price of an index holding the leased rows
-- (`held_*.sql`): jobsb's index makes every lease a non-HOT update.
CREATE TABLE dque.jobsa (LIKE dque.jobs INCLUDING ALL) WITH (fillfactor = 80);
CREATE TABLE dque.jobsb (LIKE dque.jobs INCLUDING ALL) WITH (fillfactor = 80);
CREATE INDEX jobsb_held ON dque.jobsb (qno, lease_until)
    WHERE state = 0 AND (lease_until IS NOT NULL OR wait_ms IS NOT NULL);
INSERT INTO dque.jobsa (qno, id, caller_id, priority, body, enqueued_at, ready_at)
SELECT 1, 'p' || g, false, 0, '\x0102030405', 1000, 1000 FROM generate_series(1, 300000) g;
INSERT INTO dque.jobsb SELECT * FROM dque.jobsa;
