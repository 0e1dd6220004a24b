"""The blocking client: Board and Request (redis-py)."""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import redis

from . import _wire as w
from .errors import JobTimeout
from .types import TELEMETRY_TOPICS, ComputeRequest, Entry, Event, JobData, Telemetry

DEFAULT_MODULE = "python"


def connect(url: str) -> "redis.Redis":
    """A redis-py client for a redis://, rediss:// or unix:// URL (str replies)."""
    return redis.Redis.from_url(url, decode_responses=True)


class Request:
    """A posted compute request. ``entry_id`` is the request entry's id,
    ``job_id`` its job's (known before the adapter has seen the request)."""

    def __init__(self, board: "Board", entry_id: str):
        self.board = board
        self.entry_id = entry_id
        self.job_id = w.job_id_for(entry_id)
        #: after wait(): the original job's id when this request was a duplicate
        self.duplicate_of: Optional[str] = None

    def __repr__(self) -> str:
        return f"Request(entry_id={self.entry_id!r}, job_id={self.job_id!r})"

    def status(self) -> Optional[JobData]:
        """The job's data now, or None while the adapter has not written it."""
        return self.board.job(self.job_id)

    def wait(self, timeout: float = 300.0,
             on_status: Optional[Callable[[JobData], Any]] = None) -> JobData:
        """Wait until the job is terminal and return its data, whatever the
        outcome (succeeded, failed, rejected, expired, cancelled: check
        ``job.status`` or call ``job.raise_for_status()``). Raises JobTimeout
        (code ``timeout``) only when ``timeout`` seconds pass first.

        It polls the job entry's own HASH (5 ms, growing to 200 ms, back to
        5 ms after each change) and never reads the board's event stream.
        ``on_status(job)`` is called on each status change. A duplicate
        (same module, same idempotency_key) is followed to the original job,
        whose data is returned; ``self.duplicate_of`` says so."""
        key_id = self.job_id
        end = time.monotonic() + timeout
        delay, last_status, last = w.POLL_MIN, None, None
        r, P = self.board.redis, self.board.prefix
        while True:
            raw = r.hget(f"{P}:entry:{key_id}", "data")
            if raw is not None:
                job = JobData.from_dict(json.loads(raw))
                if job.duplicate_of and key_id == self.job_id:
                    self.duplicate_of = key_id = job.duplicate_of
                    continue  # a retry: follow the original job
                last = job
                if job.status != last_status:
                    last_status, delay = job.status, w.POLL_MIN
                    if on_status is not None:
                        on_status(job)
                if job.terminal:
                    return job
            left = end - time.monotonic()
            if left <= 0:
                raise JobTimeout(f"job {self.job_id} not finished after {timeout}s "
                                 f"(last status: {last.status if last else 'none yet'})", last)
            time.sleep(min(delay, left))
            delay = min(delay * w.POLL_GROWTH, w.POLL_MAX)

    def cancel(self) -> bool:
        """Withdraw the request (docs/wire-format.md §3.2): its entry's status
        becomes ``retracted``, with the updated event in the same MULTI. Not
        yet started: the job ends ``cancelled`` and never runs; running: the
        adapter stops it and it ends ``cancelled``; finished: it keeps its
        outcome. Returns False if the entry is gone or already withdrawn."""
        return self.board.retract(self.entry_id)


class Board:
    """One blackboard. ``url``: ``redis://host:port/0`` or ``unix:///path/sock``
    (or pass ``client=`` a redis.Redis made with decode_responses=True)."""

    def __init__(self, url: Optional[str] = None, board: str = "default", *,
                 module: str = DEFAULT_MODULE, client: Optional["redis.Redis"] = None):
        self._own = client is None
        if client is None:
            if url is None:
                raise ValueError("want url or client")
            client = connect(url)
        self.redis = client
        self.board = board
        self.module = module
        self.prefix = w.prefix(board)

    def close(self) -> None:
        """Close the client (and its connections, when the board made it)."""
        self.redis.close()
        if self._own:
            self.redis.connection_pool.disconnect()

    def __enter__(self) -> "Board":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- posting -------------------------------------------------------

    def post(self, template: Optional[str] = None, args: Optional[Sequence[str]] = None,
             resources: Any = None, priority: Optional[int] = None,
             deadline: Optional[float] = None, idempotency_key: Optional[str] = None,
             module: Optional[str] = None, *, command: Optional[Sequence[str]] = None,
             entry_priority: int = 1, ttl_seconds: Optional[float] = None,
             parent_id: Optional[str] = None, tags: Iterable[str] = ("compute", "request"),
             metadata: Optional[Dict[str, Any]] = None, request: Optional[ComputeRequest] = None,
             **fields: Any) -> Request:
        """Post a compute.request in one MULTI (§3); returns its Request.

        template or command (exactly one); args: appended arguments;
        resources: a ResourceRequirements or dict (cpu_cores, memory GB, ...);
        priority: request priority 0..9 (9 most urgent); deadline: epoch
        seconds; idempotency_key: same module + same key = one job; module:
        the source module (default: the Board's). Other request fields
        (account, timeout, payload, environment, ...) as keywords, or a
        whole ComputeRequest as ``request``. entry_priority is the entry's
        0..3 (LOW..CRITICAL)."""
        data = w.make_request_data(template, command, args, resources, priority, deadline,
                                   idempotency_key, request, fields)
        plan = w.PostPlan(self.board, w.REQUEST_TOPIC, data, module or self.module,
                          priority=entry_priority, ttl_seconds=ttl_seconds, tags=tags,
                          parent_id=parent_id, metadata=metadata)
        pipe = self.redis.pipeline(transaction=True)
        plan.queue(pipe)
        pipe.execute()
        return Request(self, plan.entry_id)

    def post_entry(self, topic: str, data: Any, *, module: Optional[str] = None,
                   priority: int = 1, confidence: float = 1.0, ttl_seconds: Optional[float] = None,
                   tags: Iterable[str] = (), parent_id: Optional[str] = None,
                   metadata: Optional[Dict[str, Any]] = None) -> str:
        """Post any blackboard entry (one MULTI); returns its entry_id. For
        compute requests use post()."""
        plan = w.PostPlan(self.board, topic, data, module or self.module, priority=priority,
                          confidence=confidence, ttl_seconds=ttl_seconds, tags=tags,
                          parent_id=parent_id, metadata=metadata)
        pipe = self.redis.pipeline(transaction=True)
        plan.queue(pipe)
        pipe.execute()
        return plan.entry_id

    def request(self, entry_id: str) -> Request:
        """A Request for an entry id posted earlier (e.g. by another process)."""
        return Request(self, entry_id)

    def retract(self, entry_id: str) -> bool:
        """Set an entry's status to retracted (with its updated event, and out
        of the expiry index) if it is active or consumed; see Request.cancel."""
        key = f"{self.prefix}:entry:{entry_id}"
        with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    old, topic = [w.text(v) for v in pipe.hmget(key, "status", "topic")]
                    if old not in w.RETRACTABLE:
                        pipe.unwatch()
                        return False
                    pipe.multi()
                    pipe.hset(key, "status", "retracted")
                    pipe.zrem(f"{self.prefix}:expiry", entry_id)
                    pipe.xadd(f"{self.prefix}:events", w.retraction_event(entry_id, topic, old),
                              maxlen=w.EVENTS_MAXLEN, approximate=True)
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue

    # -- reading -------------------------------------------------------

    def get(self, entry_id: str) -> Optional[Entry]:
        """One entry, or None."""
        return w.decode_entry(self.redis.hgetall(f"{self.prefix}:entry:{entry_id}"))

    def job(self, job_id: str) -> Optional[JobData]:
        """A job's data (its compute.job entry), or None."""
        raw = self.redis.hget(f"{self.prefix}:entry:{job_id}", "data")
        return None if raw is None else JobData.from_dict(json.loads(raw))

    def _load(self, ids: Sequence[str]) -> List[Optional[Entry]]:
        pipe = self.redis.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(f"{self.prefix}:entry:{i}")
        return [w.decode_entry(h) for h in pipe.execute()]

    def query(self, topic: Any = None, source_module: Any = None, *, min_priority: int = 0,
              min_confidence: float = 0.0, tags_any: Any = None, tags_all: Any = None,
              status: Any = None, since: float = 0.0, limit: int = 0,
              include_expired: bool = False) -> List[Entry]:
        """Entries matching every given filter, highest priority first, then
        newest first: the original blackboard's query (blackboard.Query).
        topic / source_module / tags_* / status: one string or a list (topic
        ``t`` matches ``t`` and ``t.*``; ``"t.*"`` only subtopics); limit
        <= 0: no limit. An active entry whose TTL lapsed reads as
        ``expired`` and is left out unless include_expired."""
        spec = w.QuerySpec(topic, source_module, min_confidence, min_priority, tags_any,
                           tags_all, status, since, limit, include_expired)
        known = self.redis.smembers(f"{self.prefix}:topics") if spec.topics else ()
        drivers = spec.driver_keys(self.prefix, known)
        if drivers == []:
            return []
        allowed = None
        if drivers is not None:
            pipe = self.redis.pipeline(transaction=False)
            for k in drivers:
                pipe.zrangebyscore(k, spec.since, "+inf")
            allowed = {i for ids in pipe.execute() for i in ids}
            if not allowed:
                return []
        now, out, seen = time.time(), [], set()
        for p in range(3, max(spec.min_priority, 0) - 1, -1):
            offset = 0
            while True:
                ids = self.redis.zrevrangebyscore(f"{self.prefix}:prio:{p}", "+inf", spec.since,
                                                  start=offset, num=256)
                if not ids:
                    break
                offset += len(ids)
                ids = [i for i in ids if allowed is None or i in allowed]
                for e in self._load(ids) if ids else ():
                    if e is None or e.priority != p or e.entry_id in seen:
                        continue
                    if e.status == "active" and e.expired(now):
                        e.status = "expired"
                    if not spec.matches(e, now):
                        continue
                    seen.add(e.entry_id)
                    out.append(e)
                    if spec.limit > 0 and len(out) >= spec.limit:
                        return out
        return out

    # -- streams -------------------------------------------------------

    def last_event_id(self) -> str:
        """The id of the newest event on the stream ("0-0" if empty): a
        cursor for events(last_id=...) taken before you post, so nothing is missed."""
        last = self.redis.xrevrange(f"{self.prefix}:events", "+", "-", count=1)
        return w.text(last[0][0]) if last else "0-0"

    def _read_events(self, last_id: str, timeout: Optional[float], block: float) -> Iterator[Event]:
        stream = f"{self.prefix}:events"
        if last_id == "$":
            last_id = self.last_event_id()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = block if end is None else min(block, end - time.monotonic())
            if wait <= 0:
                return
            res = self.redis.xread({stream: last_id}, block=max(1, int(wait * 1000)), count=500)
            for _s, messages in res or ():
                for mid, f in messages:
                    last_id = w.text(mid)
                    yield w.decode_event(mid, f)

    def events(self, pattern: str = "*", *, last_id: str = "$", timeout: Optional[float] = None,
               block: float = 1.0) -> Iterator[Event]:
        """Yield events whose type matches ``pattern`` (fnmatch, case
        sensitive; ``*`` matches dots too). last_id: ``"$"`` only new events,
        ``"0"`` everything still in the stream, or an Event.stream_id to
        resume after. Stops after ``timeout`` seconds (None: never)."""
        for ev in self._read_events(last_id, timeout, block):
            if w.matches_pattern(ev.event_type, pattern):
                yield ev

    def pressure(self, topics: Sequence[str] = TELEMETRY_TOPICS, *, latest: bool = True,
                 timeout: Optional[float] = None, block: float = 1.0) -> Iterator[Telemetry]:
        """Yield the adapter's telemetry entries (compute.resource_utilization,
        compute.job_status, compute.metrics) as Telemetry(topic, data, entry)
        with typed data. latest: first the newest existing entry of each
        topic (unless its TTL has lapsed: a stale reading), then each new
        one as it is posted. Stops after ``timeout`` seconds (None: never)."""
        topics = tuple(topics)
        cursor = self.last_event_id()
        seen: List[str] = []
        if latest:
            pipe = self.redis.pipeline(transaction=False)
            for t in topics:
                pipe.zrevrange(f"{self.prefix}:topic:{t}", 0, 0)
            ids = [i for got in pipe.execute() for i in got]
            for e in self._load(ids) if ids else ():
                if e is not None and e.topic in topics and not e.expired(time.time()):
                    seen.append(e.entry_id)
                    yield Telemetry.from_entry(e)
        for ev in self._read_events(cursor, timeout, block):
            if ev.event_type != "blackboard.entry.added" or ev.payload.get("topic") not in topics:
                continue
            eid = ev.payload.get("entry_id")
            if not eid or eid in seen:
                continue
            e = self.get(eid)
            if e is not None and e.topic in topics:
                yield Telemetry.from_entry(e)
