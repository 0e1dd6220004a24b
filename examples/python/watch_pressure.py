#!/usr/bin/env python3
"""Watch the pool's pressure: print every compute telemetry entry as it lands.

    python3 examples/python/watch_pressure.py --redis redis://127.0.0.1:6380 [--count N]
"""
import argparse
import json
import sys

import redis

import cbclient

TOPICS = ("compute.resource_utilization", "compute.job_status", "compute.metrics")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis", default="redis://127.0.0.1:6380")
    ap.add_argument("--board", default="default")
    ap.add_argument("--count", type=int, default=0, help="stop after N entries (0 = forever)")
    ap.add_argument("--from-start", action="store_true", help="replay the event history first")
    ap.add_argument("--timeout", type=float, default=0, help="give up after this many seconds (0 = never)")
    a = ap.parse_args()

    r = redis.Redis.from_url(a.redis, decode_responses=True)
    import time
    start = time.time()
    seen = 0
    for _, ev in cbclient.events(r, "*", cursor="0" if a.from_start else "$", board=a.board):
        if a.timeout and time.time() - start > a.timeout:
            return 1
        if ev is None:
            continue
        if ev["event_type"].startswith("compute."):
            print(json.dumps({"event": ev["event_type"], "payload": ev["payload"]}, sort_keys=True), flush=True)
            continue
        if ev["event_type"] != "blackboard.entry.added" or ev["payload"].get("topic") not in TOPICS:
            continue
        e = cbclient.get_entry(r, ev["payload"]["entry_id"], a.board)
        if e is None:
            continue
        print(json.dumps({"topic": e["topic"], "priority": e["priority"], "data": e["data"]}, sort_keys=True), flush=True)
        seen += 1
        if a.count and seen >= a.count:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
