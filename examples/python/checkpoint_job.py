#!/usr/bin/env python3
"""A job that follows computeboard's checkpoint protocol (stdlib only).

It counts to --to (default 600), one step every --step seconds (0.1), and
saves its count as a checkpoint

  * every COMPUTEBOARD_CHECKPOINT_INTERVAL seconds (default 60), and
  * on SIGUSR1 (an eviction in checkpoint mode: save, then wait to be
    stopped or go on),

into COMPUTEBOARD_CHECKPOINT_DIR as <dir>/<seq>/state.json plus
MANIFEST.json (each file's size and sha256), written last in a temp dir
renamed into place. On start it resumes from COMPUTEBOARD_CHECKPOINT_RESTORE
when the adapter passes one (a checkpoint it verified), and prints
"resumed from N" (or "starting from scratch"), then "done N".
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import time

KEEP = 2  # checkpoints kept; older ones are deleted after a new one is in place


def write_checkpoint(root, seq, state):
    tmp = os.path.join(root, ".tmp-%d" % seq)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    files = []
    for name, body in (("state.json", json.dumps(state).encode()),):
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        files.append({"path": name, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    with open(os.path.join(tmp, "MANIFEST.json"), "w") as f:  # last
        json.dump({"seq": seq, "files": files}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(root, str(seq)))
    old = sorted((int(n) for n in os.listdir(root) if n.isdigit()), reverse=True)[KEEP:]
    for n in old:
        shutil.rmtree(os.path.join(root, str(n)), ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--to", type=int, default=600)
    ap.add_argument("--step", type=float, default=0.1)
    args = ap.parse_args()

    root = os.environ.get("COMPUTEBOARD_CHECKPOINT_DIR", "")
    interval = float(os.environ.get("COMPUTEBOARD_CHECKPOINT_INTERVAL", "60"))
    restore = os.environ.get("COMPUTEBOARD_CHECKPOINT_RESTORE", "")

    count, seq = 0, 0
    if restore:
        with open(os.path.join(restore, "state.json")) as f:
            state = json.load(f)
        count, seq = state["count"], state["seq"]
        print("resumed from %d" % count, flush=True)
    else:
        print("starting from scratch", flush=True)

    wanted = []
    signal.signal(signal.SIGUSR1, lambda *_: wanted.append(True))

    def checkpoint(why):
        nonlocal seq
        if not root:
            return
        seq += 1
        write_checkpoint(root, seq, {"count": count, "seq": seq})
        print("checkpoint %d at %d (%s)" % (seq, count, why), flush=True)

    last = time.monotonic()
    while count < args.to:
        time.sleep(args.step)
        count += 1
        if wanted:
            wanted.clear()
            checkpoint("signal")
            last = time.monotonic()
        elif time.monotonic() - last >= interval:
            checkpoint("interval")
            last = time.monotonic()
    print("done %d" % count, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
