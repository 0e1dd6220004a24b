"""A tiny computeboard client that uses nothing but redis-py.

It speaks the public wire format (docs/wire-format.md): a blackboard entry
is a Redis HASH plus index entries, posted in one MULTI together with its
`blackboard.entry.added` event and, for `compute.request`, an XADD to the
module's own intake lane (version 2: `P:inbox:compute:m:<module>:p<N>`,
registered in `P:inbox:compute:lanes`). Request entry ids are
`<module>:<32 hex>`, so that on a board with per-module Redis ACLs the
module's user (`adapter acl MODULE`) can write them. Copy this file into
your module; it has no other dependency.
"""
import hashlib
import json
import re
import time
import uuid

PRIORITY_NAMES = ["LOW", "NORMAL", "HIGH", "CRITICAL"]
DEFAULT_REQUEST_PRIORITY = {0: 2, 1: 4, 2: 6, 3: 8}  # entry priority -> 0..9
TERMINAL = {"succeeded", "failed", "rejected", "expired", "cancelled"}


MODULE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")


def prefix(board="default"):
    return "asi:bb:{%s}" % board


def lane_key(source_module, lane, board="default"):
    """The module's own intake lane for request priority lane (0..9)."""
    return f"{prefix(board)}:inbox:compute:m:{source_module}:p{lane}"


def new_entry_id(source_module=None):
    """A fresh entry id: "<module>:<32 hex>" for a request of a module with a
    lane-safe name (what a board with ACLs requires), else 32 hex."""
    h = uuid.uuid4().hex
    if source_module is not None and MODULE_NAME.match(source_module):
        return f"{source_module}:{h}"
    return h


def job_id(request_entry_id):
    """The compute.job entry id for a request entry id."""
    return hashlib.sha256(("compute.job:" + request_entry_id).encode()).hexdigest()[:32]


def post(r, topic, data, source_module, *, priority=1, confidence=1.0,
         ttl_seconds=None, tags=(), parent_id=None, metadata=None,
         board="default", entry_id=None, legacy_lane=False):
    """Post one blackboard entry atomically; returns its entry_id.

    A compute.request goes to the module's own intake lane (message version
    2). legacy_lane=True posts it the version 1 way, to the shared lane
    P:inbox:compute:p<N>, which only a trusted board reads."""
    p = prefix(board)
    is_request = topic == "compute.request"
    if is_request and not legacy_lane and not MODULE_NAME.match(source_module):
        raise ValueError(f"module name {source_module!r}: want 1 to 64 of [A-Za-z0-9_.-]")
    eid = entry_id or (new_entry_id(source_module) if is_request and not legacy_lane else uuid.uuid4().hex)
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
    if is_request:
        lane = data.get("priority") if isinstance(data, dict) else None
        if not (isinstance(lane, int) and not isinstance(lane, bool) and 0 <= lane <= 9):
            lane = DEFAULT_REQUEST_PRIORITY[int(priority)]
        msg = {"v": "2", "entry_id": eid, "topic": topic, "priority": str(int(priority)),
               "timestamp": repr(ts), "entry": json.dumps(canonical, allow_nan=False)}
        if legacy_lane:
            msg["v"] = "1"
            pipe.xadd(f"{p}:inbox:compute:p{lane}", msg)
        else:
            pipe.sadd(f"{p}:inbox:compute:lanes", f"{source_module}:p{lane}")
            pipe.xadd(lane_key(source_module, lane, board), msg)
    pipe.execute()
    return eid


def retract(r, entry_id, board="default"):
    """Withdraw a request: its status becomes retracted (the adapter reads the
    status itself; the event only tells it sooner). A job not yet started
    never starts; a running one is stopped and ends cancelled; a finished
    one keeps its outcome. The entry may be active (not yet accepted) or
    consumed (accepted: queued or running). Returns False if it is already
    withdrawn, expired or gone."""
    import redis  # for WatchError; redis-py is the only dependency
    p = prefix(board)
    key = f"{p}:entry:{entry_id}"
    with r.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                h = pipe.hmget(key, "status", "topic")
                old, topic = [v.decode() if isinstance(v, bytes) else v for v in h]
                if old not in ("active", "consumed"):
                    return False
                pipe.multi()
                pipe.hset(key, "status", "retracted")
                pipe.zrem(f"{p}:expiry", entry_id)
                pipe.xadd(f"{p}:events", {
                    "event_id": uuid.uuid4().hex, "event_type": "blackboard.entry.updated",
                    "source": "blackboard", "timestamp": repr(time.time()),
                    "payload": json.dumps({"entry_id": entry_id, "topic": topic, "field": "status",
                                           "old": old, "new": "retracted"})},
                    maxlen=10000, approximate=True)
                pipe.execute()
                return True
            except redis.WatchError:
                continue


def request(r, source_module, *, template=None, command=None, arguments=(),
            environment=None, priority=1, ttl_seconds=None, board="default",
            legacy_lane=False, **extra):
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
                ttl_seconds=ttl_seconds, tags=("compute", "request"), board=board,
                legacy_lane=legacy_lane)


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
