"""Wire-format helpers shared by the blocking and the asyncio client
(docs/wire-format.md). Nothing here does I/O."""
from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from fnmatch import fnmatchcase
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from .errors import InvalidArgument
from .types import PRIORITY_NAMES, ComputeRequest, Entry, Event, ResourceRequirements

MODULE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
DEFAULT_REQUEST_PRIORITY = (2, 4, 6, 8)  # by entry priority LOW..CRITICAL
EVENTS_MAXLEN = 10000
REQUEST_TOPIC = "compute.request"
JOB_TOPIC = "compute.job"
#: statuses a request entry may have when the poster withdraws it: active
#: (not yet accepted) or consumed (accepted or refused by the adapter)
RETRACTABLE = ("active", "consumed")
#: the backoff of Request.wait's polling of the job entry
POLL_MIN, POLL_MAX, POLL_GROWTH = 0.005, 0.2, 1.5


def prefix(board: str) -> str:
    return "asi:bb:{%s}" % board


def dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), sort_keys=True, allow_nan=False)


def job_id_for(request_entry_id: str) -> str:
    """The compute.job entry id (= job id) of a request entry id (§5)."""
    return hashlib.sha256(("compute.job:" + request_entry_id).encode()).hexdigest()[:32]


def text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def decode_hash(h: Mapping[Any, Any]) -> Dict[str, str]:
    return {text(k): text(v) for k, v in h.items()}


def make_request_data(template: Optional[str], command: Optional[Sequence[str]],
                      args: Optional[Sequence[str]], resources: Any, priority: Optional[int],
                      deadline: Optional[float], idempotency_key: Optional[str],
                      request: Optional[ComputeRequest], extra: Dict[str, Any]) -> Dict[str, Any]:
    if request is not None:
        data = request.to_dict()
    else:
        data = {}
    if template is not None:
        data["template"] = template
    if command is not None:
        data["command"] = [str(a) for a in command]
    if args:
        data["arguments"] = [str(a) for a in args]
    if resources is not None:
        data["resource_requirements"] = (resources.to_dict() if isinstance(resources, ResourceRequirements)
                                         else dict(resources))
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
            raise InvalidArgument(f"priority {priority!r}: want an int 0..9 (9 most urgent)")
        data["priority"] = priority
    if deadline is not None:
        data["deadline"] = deadline
    if idempotency_key is not None:
        data["idempotency_key"] = idempotency_key
    for k, v in extra.items():
        if v is not None:
            data[k] = v.to_dict() if isinstance(v, ResourceRequirements) else v
    if ("template" in data) == ("command" in data):
        raise InvalidArgument("want exactly one of template and command")
    return data


class PostPlan:
    """Everything one posting MULTI writes (§3): build it, then queue it on a
    transaction pipeline with ``queue`` (sync or asyncio alike)."""

    def __init__(self, board: str, topic: str, data: Any, module: str, *, priority: int = 1,
                 confidence: float = 1.0, ttl_seconds: Optional[float] = None,
                 tags: Iterable[str] = (), parent_id: Optional[str] = None,
                 metadata: Optional[Dict[str, Any]] = None):
        if isinstance(priority, bool) or priority not in (0, 1, 2, 3):
            raise InvalidArgument(f"entry priority {priority!r}: want 0..3 (LOW..CRITICAL)")
        self.is_request = topic == REQUEST_TOPIC
        if self.is_request and not MODULE_NAME.match(module or ""):
            raise InvalidArgument(f"module name {module!r}: want 1 to 64 of [A-Za-z0-9_.-]")
        self.P = prefix(board)
        self.topic, self.module, self.priority = topic, module, priority
        self.entry_id = f"{module}:{uuid.uuid4().hex}" if self.is_request else uuid.uuid4().hex
        self.ts = ts = time.time()
        self.ttl = None if ttl_seconds is None else float(ttl_seconds)
        tags = sorted(set(tags))
        metadata = metadata or {}
        try:
            data_json, meta_json = dumps(data), dumps(metadata)
        except ValueError as e:  # NaN / Infinity
            raise InvalidArgument(str(e)) from None
        self.hash = {"v": "1", "entry_id": self.entry_id, "topic": topic, "source_module": module,
                     "status": "active", "timestamp": repr(ts), "confidence": repr(float(confidence)),
                     "priority": str(priority), "data": data_json, "metadata": meta_json,
                     "tags": dumps(tags)}
        if self.ttl is not None:
            self.hash["ttl_seconds"] = repr(self.ttl)
        if parent_id is not None:
            self.hash["parent_id"] = parent_id
        self.canonical = {"entry_id": self.entry_id, "topic": topic, "data": data,
                          "source_module": module, "timestamp": ts, "confidence": float(confidence),
                          "priority": priority, "status": "active", "ttl_seconds": self.ttl,
                          "tags": tags, "parent_id": parent_id, "metadata": metadata}
        self.event = {"event_id": uuid.uuid4().hex, "event_type": "blackboard.entry.added",
                      "source": "blackboard", "timestamp": repr(ts),
                      "payload": dumps({"entry_id": self.entry_id, "topic": topic,
                                        "source_module": module,
                                        "priority": PRIORITY_NAMES[priority]})}
        p = data.get("priority") if isinstance(data, dict) else None
        self.lane = p if type(p) is int and 0 <= p <= 9 else DEFAULT_REQUEST_PRIORITY[priority]

    def queue(self, pipe: Any) -> None:
        P, eid, ts = self.P, self.entry_id, self.ts
        pipe.hset(f"{P}:entry:{eid}", mapping=self.hash)
        pipe.sadd(f"{P}:topics", self.topic)
        for key in (f"{P}:topic:{self.topic}", f"{P}:source:{self.module}",
                    f"{P}:prio:{self.priority}", f"{P}:all"):
            pipe.zadd(key, {eid: ts})
        if self.ttl is not None:
            pipe.zadd(f"{P}:expiry", {eid: ts + self.ttl})
        pipe.hincrby(f"{P}:stats", "total_posted", 1)
        pipe.xadd(f"{P}:events", self.event, maxlen=EVENTS_MAXLEN, approximate=True)
        if self.is_request:
            pipe.sadd(f"{P}:inbox:compute:lanes", f"{self.module}:p{self.lane}")
            pipe.xadd(f"{P}:inbox:compute:m:{self.module}:p{self.lane}", {
                "v": "2", "entry_id": eid, "topic": self.topic, "priority": str(self.priority),
                "timestamp": repr(ts), "entry": dumps(self.canonical)})


def retraction_event(entry_id: str, topic: str, old: str) -> Dict[str, str]:
    return {"event_id": uuid.uuid4().hex, "event_type": "blackboard.entry.updated",
            "source": "blackboard", "timestamp": repr(time.time()),
            "payload": dumps({"entry_id": entry_id, "topic": topic, "field": "status",
                              "old": old, "new": "retracted"})}


def decode_entry(h: Mapping[Any, Any]) -> Optional[Entry]:
    """An entry from its HASH (§2.1), or None for an empty/foreign HASH."""
    h = decode_hash(h)
    if not h or "entry_id" not in h:
        return None
    return Entry(
        entry_id=h["entry_id"], topic=h.get("topic", ""), data=json.loads(h.get("data", "null")),
        source_module=h.get("source_module", ""), timestamp=float(h.get("timestamp", 0)),
        confidence=float(h.get("confidence", 0)), priority=int(h.get("priority", 1)),
        status=h.get("status", ""),
        ttl_seconds=float(h["ttl_seconds"]) if "ttl_seconds" in h else None,
        tags=json.loads(h.get("tags", "[]")), parent_id=h.get("parent_id"),
        metadata=json.loads(h.get("metadata", "{}")))


def decode_event(stream_id: Any, f: Mapping[Any, Any]) -> Event:
    f = decode_hash(f)
    try:
        payload = json.loads(f.get("payload") or "{}")
    except ValueError:
        payload = {}
    return Event(event_id=f.get("event_id", ""), event_type=f.get("event_type", ""),
                 source=f.get("source", ""), timestamp=float(f.get("timestamp") or 0),
                 payload=payload if isinstance(payload, dict) else {}, stream_id=text(stream_id))


def matches_pattern(event_type: str, pattern: str) -> bool:
    return fnmatchcase(event_type, pattern)


def topic_matches(q: str, topic: str) -> bool:
    """A query topic q selects t and t.*; "t.*" selects only t's subtopics."""
    if q.endswith(".*"):
        return topic.startswith(q[:-1])
    return topic == q or topic.startswith(q + ".")


def as_list(v: Any) -> List[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    return list(v)


class QuerySpec:
    """The original blackboard's query arguments (blackboard.Query)."""

    def __init__(self, topic: Any = None, source_module: Any = None, min_confidence: float = 0.0,
                 min_priority: int = 0, tags_any: Any = None, tags_all: Any = None,
                 status: Any = None, since: float = 0.0, limit: int = 0,
                 include_expired: bool = False):
        self.topics = as_list(topic)
        self.sources = as_list(source_module)
        self.min_confidence, self.min_priority = float(min_confidence), int(min_priority)
        self.tags_any, self.tags_all = as_list(tags_any), as_list(tags_all)
        self.statuses = as_list(status)
        self.since, self.limit, self.include_expired = float(since), int(limit), include_expired

    def driver_keys(self, P: str, known_topics: Iterable[str]) -> Optional[List[str]]:
        """The index ZSETs that bound the candidates, or None for "every entry"."""
        if self.topics:
            return [f"{P}:topic:{t}" for t in sorted(known_topics)
                    if any(topic_matches(q, t) for q in self.topics)]
        if self.sources:
            return [f"{P}:source:{m}" for m in sorted(set(self.sources))]
        return None

    def matches(self, e: Entry, now: float) -> bool:
        expired = e.expired(now)
        status = "expired" if e.status == "active" and expired else e.status
        if expired and not self.include_expired:
            return False
        if self.statuses and status not in self.statuses:
            return False
        if self.topics and not any(topic_matches(q, e.topic) for q in self.topics):
            return False
        if self.sources and e.source_module not in self.sources:
            return False
        if e.confidence < self.min_confidence or e.priority < self.min_priority or e.timestamp < self.since:
            return False
        if self.tags_any and not any(t in e.tags for t in self.tags_any):
            return False
        return all(t in e.tags for t in self.tags_all)
