"""Test harness: a private redis-server on a unix socket and a real adapter
(``$COMPUTEBOARD_ADAPTER``, with cb-supervisor next to it), both in a temp
dir, both stopped at the end. Generous timeouts: CI machines are slow."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from typing import List, Optional

import redis

STARTUP_TIMEOUT = 60.0
JOB_TIMEOUT = 60.0

CONFIG = """\
board: {board}
listen: off
work_dir: {work}
templates:
  "true":
    command: [/bin/true]
  sleep:
    command: [sleep]
    allow_arguments: true
    argument_pattern: '[0-9]{{1,3}}'
    max_arguments: 1
node:
  name: {node}
  cpu_cores: 2
scheduler:
  interval: 50ms
telemetry:
  interval: 500ms
broker:
  claim_idle: 2s
  lease_timeout: 5s
  module_rate: -1
  module_max_waiting: -1
"""


def adapter_path() -> str:
    path = os.environ.get("COMPUTEBOARD_ADAPTER", "")
    if not path:
        raise unittest.SkipTest("COMPUTEBOARD_ADAPTER is not set (see scripts/test-python.sh)")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"COMPUTEBOARD_ADAPTER={path} is not an executable")
    return path


def _stop(proc: Optional[subprocess.Popen], name: str, grace: float = 30.0) -> None:
    """Stop a process this harness started: SIGTERM, then SIGKILL. The
    adapter runs in its own process group (start_new_session), so the job
    supervisors it started go with it."""
    if proc is None:
        return
    group = proc.pid  # start_new_session: pgid == pid
    if proc.poll() is None:
        try:
            os.killpg(group, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    try:  # leftovers of the group (job supervisors)
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Stack:
    """redis-server + adapter. ``url`` is the unix:// URL of the board."""

    def __init__(self, board: str = "default", node: str = "pynode"):
        self.board, self.node = board, node
        self.dir = tempfile.mkdtemp(prefix="cbpy-")
        # Jobs of an adapter running as root run as nobody, who must be able
        # to pass through to the work dir.
        os.chmod(self.dir, 0o711)
        self.sock = os.path.join(self.dir, "redis.sock")
        self.url = "unix://" + self.sock
        self.redis_proc: Optional[subprocess.Popen] = None
        self.adapter_proc: Optional[subprocess.Popen] = None
        self._logs: List = []

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.dir, name), errors="replace") as f:
                return f.read()[-8000:]
        except OSError:
            return ""

    def _open_log(self, name: str):
        f = open(os.path.join(self.dir, name), "wb")
        self._logs.append(f)
        return f

    def start(self) -> "Stack":
        try:
            self._start_redis()
            self._start_adapter()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_redis(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise unittest.SkipTest("redis-server is not installed")
        out = self._open_log("redis.log")
        self.redis_proc = subprocess.Popen(
            [exe, "--port", "0", "--unixsocket", self.sock, "--unixsocketperm", "700",
             "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self.redis_proc.poll() is not None:
                raise RuntimeError("redis-server exited:\n" + self.log("redis.log"))
            if os.path.exists(self.sock):
                try:
                    c = redis.Redis(unix_socket_path=self.sock)
                    c.ping()
                    c.close()
                    return
                except redis.RedisError:
                    pass
            if time.monotonic() > end:
                raise RuntimeError("redis-server did not start:\n" + self.log("redis.log"))
            time.sleep(0.05)

    def _start_adapter(self) -> None:
        exe = adapter_path()
        cfg = os.path.join(self.dir, "adapter.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(board=self.board, node=self.node, work=os.path.join(self.dir, "work")))
        out = self._open_log("adapter.log")
        self.adapter_proc = subprocess.Popen(
            [exe, "serve", "--config", cfg, "--redis", self.url],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.dir)
        # Ready when a scheduler holds the lease and our node has registered.
        P = "asi:bb:{%s}" % self.board
        c = redis.Redis(unix_socket_path=self.sock, decode_responses=True)
        try:
            end = time.monotonic() + STARTUP_TIMEOUT
            while True:
                if self.adapter_proc.poll() is not None:
                    raise RuntimeError("adapter exited:\n" + self.log("adapter.log"))
                if c.exists(f"{P}:pool:lease") and c.hexists(f"{P}:pool:nodes", self.node):
                    return
                if time.monotonic() > end:
                    raise RuntimeError("adapter not ready:\n" + self.log("adapter.log"))
                time.sleep(0.1)
        finally:
            c.close()

    def stop(self) -> None:
        _stop(self.adapter_proc, "adapter")
        self.adapter_proc = None
        _stop(self.redis_proc, "redis-server")
        self.redis_proc = None
        for f in self._logs:
            f.close()
        self._logs = []
        if os.environ.get("COMPUTEBOARD_KEEP_TMP"):
            print("kept", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
