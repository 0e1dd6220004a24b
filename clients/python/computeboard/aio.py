"""The asyncio twin of computeboard.client: AsyncBoard and AsyncRequest
(redis.asyncio). Same arguments, same results; generators are async
generators, and ``on_status`` may be a plain function or a coroutine
function."""
from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any, AsyncIterator, Callable, Dict, Iterable, List, Optional, Sequence

import redis
import redis.asyncio as aredis

from . import _wire as w
from .client import DEFAULT_MODULE
from .errors import JobTimeout
from .types import TELEMETRY_TOPICS, ComputeRequest, Entry, Event, JobData, Telemetry


def connect(url: str) -> "aredis.Redis":
    return aredis.Redis.from_url(url, decode_responses=True)


class AsyncRequest:
    """A posted compute request (see computeboard.Request)."""

    def __init__(self, board: "AsyncBoard", entry_id: str):
        self.board = board
        self.entry_id = entry_id
        self.job_id = w.job_id_for(entry_id)
        self.duplicate_of: Optional[str] = None

    def __repr__(self) -> str:
        return f"AsyncRequest(entry_id={self.entry_id!r}, job_id={self.job_id!r})"

    async def status(self) -> Optional[JobData]:
        return await self.board.job(self.job_id)

    async def wait(self, timeout: float = 300.0,
                   on_status: Optional[Callable[[JobData], Any]] = None) -> JobData:
        """As Request.wait: returns the terminal job's data whatever its
        status; raises JobTimeout only on timeout. Polls the job entry."""
        key_id = self.job_id
        end = time.monotonic() + timeout
        delay, last_status, last = w.POLL_MIN, None, None
        r, P = self.board.redis, self.board.prefix
        while True:
            raw = await r.hget(f"{P}:entry:{key_id}", "data")
            if raw is not None:
                job = JobData.from_dict(json.loads(raw))
                if job.duplicate_of and key_id == self.job_id:
                    self.duplicate_of = key_id = job.duplicate_of
                    continue  # a retry: follow the original job
                last = job
                if job.status != last_status:
                    last_status, delay = job.status, w.POLL_MIN
                    if on_status is not None:
                        res = on_status(job)
                        if inspect.isawaitable(res):
                            await res
                if job.terminal:
                    return job
            left = end - time.monotonic()
            if left <= 0:
                raise JobTimeout(f"job {self.job_id} not finished after {timeout}s "
                                 f"(last status: {last.status if last else 'none yet'})", last)
            await asyncio.sleep(min(delay, left))
            delay = min(delay * w.POLL_GROWTH, w.POLL_MAX)

    async def cancel(self) -> bool:
        """As Request.cancel."""
        return await self.board.retract(self.entry_id)


class AsyncBoard:
    """One blackboard, asyncio flavour. ``await board.close()`` when done,
    or use ``async with AsyncBoard(url) as board``."""

    def __init__(self, url: Optional[str] = None, board: str = "default", *,
                 module: str = DEFAULT_MODULE, client: Optional["aredis.Redis"] = None):
        self._own = client is None
        if client is None:
            if url is None:
                raise ValueError("want url or client")
            client = connect(url)
        self.redis = client
        self.board = board
        self.module = module
        self.prefix = w.prefix(board)

    async def close(self) -> None:
        """Close the client (and its connections, when the board made it)."""
        close = getattr(self.redis, "aclose", None) or self.redis.close
        await close()
        if self._own:
            await self.redis.connection_pool.disconnect()

    async def __aenter__(self) -> "AsyncBoard":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def post(self, template: Optional[str] = None, args: Optional[Sequence[str]] = None,
                   resources: Any = None, priority: Optional[int] = None,
                   deadline: Optional[float] = None, idempotency_key: Optional[str] = None,
                   module: Optional[str] = None, *, command: Optional[Sequence[str]] = None,
                   entry_priority: int = 1, ttl_seconds: Optional[float] = None,
                   parent_id: Optional[str] = None, tags: Iterable[str] = ("compute", "request"),
                   metadata: Optional[Dict[str, Any]] = None,
                   request: Optional[ComputeRequest] = None, **fields: Any) -> AsyncRequest:
        """As Board.post."""
        data = w.make_request_data(template, command, args, resources, priority, deadline,
                                   idempotency_key, request, fields)
        plan = w.PostPlan(self.board, w.REQUEST_TOPIC, data, module or self.module,
                          priority=entry_priority, ttl_seconds=ttl_seconds, tags=tags,
                          parent_id=parent_id, metadata=metadata)
        async with self.redis.pipeline(transaction=True) as pipe:
            plan.queue(pipe)
            await pipe.execute()
        return AsyncRequest(self, plan.entry_id)

    async def post_entry(self, topic: str, data: Any, *, module: Optional[str] = None,
                         priority: int = 1, confidence: float = 1.0,
                         ttl_seconds: Optional[float] = None, tags: Iterable[str] = (),
                         parent_id: Optional[str] = None,
                         metadata: Optional[Dict[str, Any]] = None) -> str:
        plan = w.PostPlan(self.board, topic, data, module or self.module, priority=priority,
                          confidence=confidence, ttl_seconds=ttl_seconds, tags=tags,
                          parent_id=parent_id, metadata=metadata)
        async with self.redis.pipeline(transaction=True) as pipe:
            plan.queue(pipe)
            await pipe.execute()
        return plan.entry_id

    def request(self, entry_id: str) -> AsyncRequest:
        return AsyncRequest(self, entry_id)

    async def retract(self, entry_id: str) -> bool:
        key = f"{self.prefix}:entry:{entry_id}"
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    old, topic = [w.text(v) for v in await pipe.hmget(key, "status", "topic")]
                    if old not in w.RETRACTABLE:
                        await pipe.unwatch()
                        return False
                    pipe.multi()
                    pipe.hset(key, "status", "retracted")
                    pipe.zrem(f"{self.prefix}:expiry", entry_id)
                    pipe.xadd(f"{self.prefix}:events", w.retraction_event(entry_id, topic, old),
                              maxlen=w.EVENTS_MAXLEN, approximate=True)
                    await pipe.execute()
                    return True
                except redis.WatchError:
                    continue

    async def get(self, entry_id: str) -> Optional[Entry]:
        return w.decode_entry(await self.redis.hgetall(f"{self.prefix}:entry:{entry_id}"))

    async def job(self, job_id: str) -> Optional[JobData]:
        raw = await self.redis.hget(f"{self.prefix}:entry:{job_id}", "data")
        return None if raw is None else JobData.from_dict(json.loads(raw))

    async def _load(self, ids: Sequence[str]) -> List[Optional[Entry]]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.hgetall(f"{self.prefix}:entry:{i}")
            return [w.decode_entry(h) for h in await pipe.execute()]

    async def query(self, topic: Any = None, source_module: Any = None, *, min_priority: int = 0,
                    min_confidence: float = 0.0, tags_any: Any = None, tags_all: Any = None,
                    status: Any = None, since: float = 0.0, limit: int = 0,
                    include_expired: bool = False) -> List[Entry]:
        """As Board.query."""
        spec = w.QuerySpec(topic, source_module, min_confidence, min_priority, tags_any,
                           tags_all, status, since, limit, include_expired)
        known = await self.redis.smembers(f"{self.prefix}:topics") if spec.topics else ()
        drivers = spec.driver_keys(self.prefix, known)
        if drivers == []:
            return []
        allowed = None
        if drivers is not None:
            async with self.redis.pipeline(transaction=False) as pipe:
                for k in drivers:
                    pipe.zrangebyscore(k, spec.since, "+inf")
                allowed = {i for ids in await pipe.execute() for i in ids}
            if not allowed:
                return []
        now, out, seen = time.time(), [], set()
        for p in range(3, max(spec.min_priority, 0) - 1, -1):
            offset = 0
            while True:
                ids = await self.redis.zrevrangebyscore(f"{self.prefix}:prio:{p}", "+inf",
                                                        spec.since, start=offset, num=256)
                if not ids:
                    break
                offset += len(ids)
                ids = [i for i in ids if allowed is None or i in allowed]
                for e in (await self._load(ids)) if ids else ():
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

    async def last_event_id(self) -> str:
        """The id of the newest event on the stream ("0-0" if empty): a
        cursor for events(last_id=...) taken before you post, so nothing is missed."""
        last = await self.redis.xrevrange(f"{self.prefix}:events", "+", "-", count=1)
        return w.text(last[0][0]) if last else "0-0"

    async def _read_events(self, last_id: str, timeout: Optional[float],
                           block: float) -> AsyncIterator[Event]:
        stream = f"{self.prefix}:events"
        if last_id == "$":
            last_id = await self.last_event_id()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = block if end is None else min(block, end - time.monotonic())
            if wait <= 0:
                return
            res = await self.redis.xread({stream: last_id}, block=max(1, int(wait * 1000)), count=500)
            for _s, messages in res or ():
                for mid, f in messages:
                    last_id = w.text(mid)
                    yield w.decode_event(mid, f)

    async def events(self, pattern: str = "*", *, last_id: str = "$",
                     timeout: Optional[float] = None, block: float = 1.0) -> AsyncIterator[Event]:
        """As Board.events (an async generator)."""
        async for ev in self._read_events(last_id, timeout, block):
            if w.matches_pattern(ev.event_type, pattern):
                yield ev

    async def pressure(self, topics: Sequence[str] = TELEMETRY_TOPICS, *, latest: bool = True,
                       timeout: Optional[float] = None,
                       block: float = 1.0) -> AsyncIterator[Telemetry]:
        """As Board.pressure (an async generator)."""
        topics = tuple(topics)
        cursor = await self.last_event_id()
        seen: List[str] = []
        if latest:
            async with self.redis.pipeline(transaction=False) as pipe:
                for t in topics:
                    pipe.zrevrange(f"{self.prefix}:topic:{t}", 0, 0)
                ids = [i for got in await pipe.execute() for i in got]
            for e in (await self._load(ids)) if ids else ():
                if e is not None and e.topic in topics and not e.expired(time.time()):
                    seen.append(e.entry_id)
                    yield Telemetry.from_entry(e)
        async for ev in self._read_events(cursor, timeout, block):
            if ev.event_type != "blackboard.entry.added" or ev.payload.get("topic") not in topics:
                continue
            eid = ev.payload.get("entry_id")
            if not eid or eid in seen:
                continue
            e = await self.get(eid)
            if e is not None and e.topic in topics:
                yield Telemetry.from_entry(e)
