#!/usr/bin/env python3
"""Quickstart for the computeboard Python package (clients/python): post a
job and wait for it, cancel another, and watch the pool's pressure. Against
config/demo.yaml's templates (hello, sleep):

    python3 examples/python/quickstart.py --redis redis://127.0.0.1:6380/0
"""
import argparse
import os
import sys

# Run from a checkout without installing (pip install ./clients/python does it for good).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from computeboard import Board, ComputeMetrics  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--redis", default="redis://127.0.0.1:6380/0", help="blackboard URL (redis:// or unix://)")
ap.add_argument("--board", default="default")
ap.add_argument("--template", default="hello", help="a template that finishes quickly")
ap.add_argument("--sleep-template", default="sleep", help="a template taking a number of seconds")
a = ap.parse_args()

# --- the client code ---
board = Board(a.redis, a.board, module="quickstart")
job = board.post(template=a.template).wait(timeout=60, on_status=lambda j: print("status:", j.status))
print("job", job.job_id, job.status, "exit", job.exit_code, "code", job.code or "-", "stdout", job.stdout_path)

slow = board.post(template=a.sleep_template, args=["30"], priority=2)
print("cancel sent:", slow.cancel(), "->", slow.wait(timeout=60).status)

for t in board.pressure(timeout=30):  # newest telemetry first, then as it lands
    print(t.topic, t.data)
    if isinstance(t.data, ComputeMetrics):
        break
# --- end ---
sys.exit(0 if job.succeeded else 1)
