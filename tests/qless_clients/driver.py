"""Drives a Python qless client for dque's interop tests.

    driver.py CLIENT URL WORKER

CLIENT is `qless` (qless-py 0.11.4) or `reqless` (reqless 0.13.3). Reads one
JSON command per line from stdin and answers one JSON line on stdout:
{"ok": RESULT} or {"error": "TYPE: message"}. Jobs popped stay held here,
by jid, for the commands that settle them.
"""
import json
import sys

CLIENT, URL, WORKER = sys.argv[1], sys.argv[2], sys.argv[3]
if CLIENT == "qless":
    import qless as lib
else:
    import reqless as lib

client = lib.Client(URL, hostname=WORKER)
held = {}


def data_out(job):
    # qless-py decodes `data` into Python values; reqless keeps the text.
    return json.dumps(job.data) if CLIENT == "qless" else job.data


def job_view(job):
    history = []
    for entry in job.history or []:
        history.append(entry.get("what") if isinstance(entry, dict) else entry)
    return {
        "jid": job.jid,
        "data": data_out(job),
        "priority": job.priority,
        "klass": job.klass_name,
        "queue": job.queue_name,
        "state": job.state,
        "worker": job.worker_name,
        "tags": list(job.tags or []),
        "retries": job.original_retries,
        "remaining": job.retries_left,
        "failure": job.failure or {},
        "history": history,
        "dependencies": list(job.dependencies or []),
        "dependents": list(job.dependents or []),
    }


def put(cmd):
    queue = client.queues[cmd["queue"]]
    data = cmd.get("data", "{}")
    if CLIENT == "qless":
        data = json.loads(data)
    kwargs = {}
    for name in ("priority", "tags", "delay", "retries", "jid", "depends", "throttles"):
        if cmd.get(name) is not None:
            kwargs[name] = cmd[name]
    return queue.put(cmd.get("klass", "py.Job"), data, **kwargs)


def pop(cmd):
    job = client.queues[cmd["queue"]].pop()
    if job is None:
        return None
    held[job.jid] = job
    return job_view(job)


def handle(cmd):
    op = cmd["op"]
    if op == "put":
        return put(cmd)
    if op == "pop":
        return pop(cmd)
    if op == "complete":
        job = held.pop(cmd["jid"])
        return job.complete(cmd.get("next")) if cmd.get("next") else job.complete()
    if op == "fail":
        return held.pop(cmd["jid"]).fail(cmd["group"], cmd["message"])
    if op == "retry":
        job = held.pop(cmd["jid"])
        return job.retry(cmd.get("delay", 0), cmd.get("group"), cmd.get("message"))
    if op == "priority":
        client.jobs[cmd["jid"]].priority = cmd["priority"]
        return True
    if op == "heartbeat":
        return held[cmd["jid"]].heartbeat()
    if op == "get":
        job = client.jobs[cmd["jid"]]
        return job_view(job) if job is not None else None
    if op == "unfail":
        return client.unfail(cmd["group"], cmd["queue"], cmd.get("count", 500))
    if op == "stats":
        return client.queues[cmd["queue"]].stats(cmd.get("date"))
    if op == "counts":
        return client.queues[cmd["queue"]].counts
    if op == "config":
        client.config[cmd["name"]] = cmd["value"]
        return True
    if op == "failed":
        return client.jobs.failed(cmd["group"])
    # Limits and pause (issue 27).
    if op == "pause":
        return client.queues[cmd["queue"]].pause()
    if op == "unpause":
        return client.queues[cmd["queue"]].unpause()
    if op == "throttle_set":
        return client.throttles[cmd["name"]].set_maximum(cmd["maximum"])
    if op == "throttle_maximum":
        return client.throttles[cmd["name"]].maximum()
    if op == "throttle_locks":
        return client.throttles[cmd["name"]].locks()
    # Recurring jobs (issue 27).
    if op == "recur":
        data = cmd.get("data", "{}")
        if CLIENT == "qless":
            data = json.loads(data)
        queue = client.queues[cmd["queue"]]
        return queue.recur(cmd.get("klass", "py.Job"), data, cmd["interval"],
                           cmd.get("offset", 0), jid=cmd.get("jid"))
    if op == "recurring":
        return list(client.queues[cmd["queue"]].jobs.recurring())
    if op == "get_recur":
        job = client.jobs[cmd["jid"]]
        if job is None:
            return None
        return {"jid": job.jid, "klass": job.klass_name, "queue": job.queue_name,
                "interval": job.interval, "count": job.count,
                "priority": job.priority, "data": data_out(job)}
    if op == "unrecur":
        client.jobs[cmd["jid"]].cancel()
        return True
    raise ValueError("unknown op " + op)


for line in sys.stdin:
    try:
        answer = {"ok": handle(json.loads(line))}
    except Exception as exc:  # the test reads the error and decides
        answer = {"error": "%s: %s" % (type(exc).__name__, exc)}
    sys.stdout.write(json.dumps(answer, default=str) + "\n")
    sys.stdout.flush()
