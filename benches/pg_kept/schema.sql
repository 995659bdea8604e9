CREATE SCHEMA dque;
CREATE TABLE dque.jobs (
    seq bigserial PRIMARY KEY, qno integer NOT NULL, id text NOT NULL, caller_id boolean NOT NULL,
    priority integer NOT NULL, body bytea NOT NULL, header_names text[], header_values text[],
    enqueued_at bigint NOT NULL, ready_at bigint NOT NULL, state smallint NOT NULL DEFAULT 0,
    attempts integer NOT NULL DEFAULT 0, lease_until bigint, lease_token bigint, died bigint, reason text,
    wait_day bigint, wait_ms bigint, started bigint, finished bigint, worker text
) WITH (fillfactor = 80);
CREATE SEQUENCE dque.lease_tokens; CREATE SEQUENCE dque.deaths;
CREATE INDEX jobs_next ON dque.jobs (qno, priority, ready_at, seq) WHERE state < 2;
CREATE UNIQUE INDEX jobs_live_ids ON dque.jobs (qno, id) WHERE state < 2;
CREATE INDEX jobs_dead ON dque.jobs (qno, died) WHERE state = 2;
CREATE INDEX jobs_kept_ids ON dque.jobs (qno, id) WHERE state >= 2;
CREATE INDEX jobs_completed ON dque.jobs (qno, finished) WHERE state = 3;
CREATE TABLE dque.stats_log (queue text NOT NULL, day bigint NOT NULL, kind smallint NOT NULL, ms bigint NOT NULL, grp text, wait_day bigint, wait_ms bigint);
CREATE TABLE dque.queues (qno serial PRIMARY KEY, name text NOT NULL UNIQUE, paused boolean NOT NULL DEFAULT false);
CREATE TABLE dque.limits (qno integer NOT NULL, name text NOT NULL, max integer NOT NULL, PRIMARY KEY (qno, name));
INSERT INTO dque.queues (name) VALUES ('bench');
INSERT INTO dque.queues (name) VALUES ('big');
-- the kept counts: one row per queue and slot (pg_backend_pid() % 64)
CREATE TABLE dque.kept (qno integer NOT NULL, slot integer NOT NULL, waiting bigint NOT NULL DEFAULT 0,
    dead bigint NOT NULL DEFAULT 0, completed bigint NOT NULL DEFAULT 0, PRIMARY KEY (qno, slot));
-- every queue's 64 slots are made with the queue (an UPDATE of a slot
-- then never needs ON CONFLICT)
INSERT INTO dque.kept (qno, slot) SELECT q, g FROM generate_series(1, 2) q, generate_series(0, 63) g;
