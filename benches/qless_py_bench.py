"""The qless-py 0.11.4 side of `benches/redis.rs`: one process, one client.

    qless_py_bench.py URL QUEUE OP COUNT FIRST WORKER

OP is `put` (COUNT jobs, data {"n": FIRST + i}, one `put` each), `pop`
(pop and complete one job at a time until the queue is empty; COUNT is
ignored) or `popbatch` (the same, popping 100 at a time). The process connects and loads the script first, prints
{"ready": true}, waits for a line on stdin, so that the bench starts every
process at once and outside its command counts, then runs and prints one
JSON line: {"op", "jobs", "seconds", "rate"}.
"""
import json
import sys
import time

import qless

URL, QUEUE, OP, COUNT, FIRST, WORKER = sys.argv[1:7]
COUNT, FIRST = int(COUNT), int(FIRST)

client = qless.Client(URL, hostname=WORKER)
queue = client.queues[QUEUE]
# Connection set-up (CLIENT SETINFO, SELECT) and the first EVALSHA (or
# SCRIPT LOAD) happen here, not in the measured part: a read of the config.
client("config.get", "heartbeat")


def put():
    for i in range(COUNT):
        queue.put("bench.Job", {"n": FIRST + i})
    return COUNT


def pop():
    done = 0
    while True:
        job = queue.pop()
        if job is None:
            return done
        job.complete()
        done += 1


def popbatch():
    done = 0
    while True:
        jobs = queue.pop(100)
        if not jobs:
            return done
        for job in jobs:
            job.complete()
        done += len(jobs)


def main():
    run = {"put": put, "pop": pop, "popbatch": popbatch}[OP]
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    jobs = run()
    seconds = time.perf_counter() - start
    rate = jobs / seconds if seconds > 0 else 0.0
    print(json.dumps({"op": OP, "jobs": jobs, "seconds": seconds, "rate": rate}), flush=True)


main()
