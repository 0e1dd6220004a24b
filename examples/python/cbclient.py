"""A tiny computeboard client that uses nothing but redis-py.

It speaks the public wire format (docs/wire-format.md): a blackboard entry
is a Redis HASH plus index entries, posted in one MULTI together with its
`blackboard.entry.added` event and, for `compute.request`, an XADD to the
intake lane. Copy this file into your module; it has no other dependency.
"""
import hashlib
import json
import time
import uuid

PRIORITY_NAMES = ["LOW", "NORMAL", "HIGH", "CRITICAL"]
DEFAULT_REQUEST_PRIORITY = {0: 2, 1: 4, 2: 6, 3: 8}  # entry priority -> 0..9
TERMINAL = {"succeeded", "failed", "rejected", "expired", "cancelled"}


def prefix(board="default"):
    return "asi:bb:{%s}" % board


def job_id(request_entry_id):
    """The compute.job entry id for a request entry id."""
    return hashlib.sha256(("compute.job:" + request_entry_id).encode()).hexdigest()[:32]


def post(r, topic, data, source_module, *, priority=1, confidence=1.0,
         ttl_seconds=None, tags=(), parent_id=None, metadata=None,
         board="default", entry_id=None):
    """Post one blackboard entry atomically; returns its entry_id."""
    p = prefix(board)
    eid = entry_id or uuid.uuid4().hex
    ts = time.time()
    tags = sorted(set(tags))
    metadata = metadata or {}
    fields = {
        "v": "1", "entry_id": eid, "topic": topic, "source_module": source_module,
        "status": "active", "timestamp": repr(ts), "confidence": repr(float(confidence)),
        "priority": str(int(priority)),
        "data": json.dumps(data, allow_nan=False),
        "metadata": json.dumps(metadata, allow_nan=False),
        "tags": json.dumps(tags),
    }
    if ttl_seconds is not None:
        fields["ttl_seconds"] = repr(float(ttl_seconds))
    if parent_id:
        fields["parent_id"] = parent_id
    canonical = {
        "entry_id": eid, "topic": topic, "data": data, "source_module": source_module,
        "timestamp": ts, "confidence": float(confidence), "priority": int(priority),
        "status": "active", "ttl_seconds": ttl_seconds, "tags": tags,
        "parent_id": parent_id, "metadata": metadata,
    }
    event = {
        "event_id": uuid.uuid4().hex, "event_type": "blackboard.entry.added",
        "source": "blackboard", "timestamp": repr(ts),
        "payload": json.dumps({"entry_id": eid, "topic": topic, "source_module": source_module,
                               "priority": PRIORITY_NAMES[int(priority)]}),
    }
    pipe = r.pipeline(transaction=True)
    pipe.hset(f"{p}:entry:{eid}", mapping=fields)
    pipe.sadd(f"{p}:topics", topic)
    pipe.zadd(f"{p}:topic:{topic}", {eid: ts})
    pipe.zadd(f"{p}:source:{source_module}", {eid: ts})
    pipe.zadd(f"{p}:prio:{int(priority)}", {eid: ts})
    pipe.zadd(f"{p}:all", {eid: ts})
    if ttl_seconds is not None:
        pipe.zadd(f"{p}:expiry", {eid: ts + float(ttl_seconds)})
    pipe.hincrby(f"{p}:stats", "total_posted", 1)
    pipe.xadd(f"{p}:events", event, maxlen=10000, approximate=True)
    if topic == "compute.request":
        lane = data.get("priority") if isinstance(data, dict) else None
        if not (isinstance(lane, int) and not isinstance(lane, bool) and 0 <= lane <= 9):
            lane = DEFAULT_REQUEST_PRIORITY[int(priority)]
        pipe.xadd(f"{p}:inbox:compute:p{lane}", {
            "v": "1", "entry_id": eid, "topic": topic, "priority": str(int(priority)),
            "timestamp": repr(ts), "entry": json.dumps(canonical, allow_nan=False)})
    pipe.execute()
    return eid


def request(r, source_module, *, template=None, command=None, arguments=(),
            environment=None, priority=1, ttl_seconds=None, board="default", **extra):
    """Post a compute.request entry; returns its entry_id."""
    data = dict(extra)
    if template is not None:
        data["template"] = template
    if command is not None:
        data["command"] = list(command)
    if arguments:
        data["arguments"] = list(arguments)
    if environment:
        data["environment"] = dict(environment)
    return post(r, "compute.request", data, source_module, priority=priority,
                ttl_seconds=ttl_seconds, tags=("compute", "request"), board=board)


def get_entry(r, entry_id, board="default"):
    """Read one entry as a dict (data/metadata/tags decoded), or None."""
    h = r.hgetall(f"{prefix(board)}:entry:{entry_id}")
    if not h:
        return None
    h = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
         for k, v in h.items()}
    for k in ("data", "metadata", "tags"):
        if k in h:
            h[k] = json.loads(h[k])
    for k in ("timestamp", "confidence", "ttl_seconds"):
        if k in h:
            h[k] = float(h[k])
    h["priority"] = int(h.get("priority", 1))
    return h


def wait_job(r, request_entry_id, timeout=60.0, board="default", poll=0.05):
    """Wait until the request's compute.job entry is terminal; returns its data."""
    jid = job_id(request_entry_id)
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        e = get_entry(r, jid, board)
        if e is not None:
            last = e["data"]
            if last.get("status") in TERMINAL:
                return last
        time.sleep(poll)
    raise TimeoutError(f"job {jid} not finished after {timeout}s (last: {last})")


def events(r, pattern="*", cursor="$", block_ms=1000, board="default"):
    """Yield (cursor, event) from the event stream, fnmatch-filtered like EventBus.subscribe."""
    from fnmatch import fnmatchcase
    key = f"{prefix(board)}:events"
    while True:
        res = r.xread({key: cursor}, block=block_ms, count=100)
        if not res:
            yield cursor, None
            continue
        for _, msgs in res:
            for mid, f in msgs:
                cursor = mid
                f = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                     for k, v in f.items()}
                if fnmatchcase(f.get("event_type", ""), pattern):
                    f["payload"] = json.loads(f.get("payload") or "{}")
                    yield cursor, f
