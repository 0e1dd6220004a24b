#!/usr/bin/env python3
"""Post a compute request with plain redis-py and wait for its job to finish.

    python3 examples/python/post_request.py --redis redis://127.0.0.1:6380 --template hello
"""
import argparse
import json
import sys

import redis

import cbclient


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis", default="redis://127.0.0.1:6380", help="blackboard URL (redis:// or unix://)")
    ap.add_argument("--board", default="default")
    ap.add_argument("--module", default="reasoning", help="source_module of the request")
    ap.add_argument("--template", default="hello")
    ap.add_argument("--command", nargs="+", help="raw argv (argv[0] must be on the operator's allowlist)")
    ap.add_argument("--arg", action="append", default=[], help="argument appended to the template")
    ap.add_argument("--priority", type=int, help="0..9, 9 most urgent")
    ap.add_argument("--entry-priority", type=int, default=1, help="blackboard priority LOW..CRITICAL = 0..3")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--no-wait", action="store_true")
    a = ap.parse_args()

    r = redis.Redis.from_url(a.redis, decode_responses=True)
    extra = {}
    if a.priority is not None:
        extra["priority"] = a.priority
    eid = cbclient.request(r, a.module, template=None if a.command else a.template,
                           command=a.command, arguments=a.arg, priority=a.entry_priority,
                           board=a.board, **extra)
    print(json.dumps({"request_entry_id": eid, "job_id": cbclient.job_id(eid)}), flush=True)
    if a.no_wait:
        return 0
    job = cbclient.wait_job(r, eid, timeout=a.timeout, board=a.board)
    print(json.dumps(job, sort_keys=True), flush=True)
    return 0 if job.get("status") == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
