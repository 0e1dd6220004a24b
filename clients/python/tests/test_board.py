"""The blocking client against a real redis-server and a real adapter."""
from __future__ import annotations

import time
import unittest
import uuid

from computeboard import (Board, ComputeMetrics, InvalidArgument, JobRejected, JobStatusSummary,
                          JobTimeout, ResourceUtilization)

from .harness import JOB_TIMEOUT, Stack


def wait_until_known(req, timeout=JOB_TIMEOUT):
    """Wait until the adapter has written the job entry (queued or later)."""
    end = time.monotonic() + timeout
    while True:
        job = req.status()
        if job is not None:
            return job
        if time.monotonic() > end:
            raise AssertionError(f"no job entry for {req} after {timeout}s")
        time.sleep(0.02)


class BoardTest(unittest.TestCase):
    stack = None

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack().start()
        cls.board = Board(cls.stack.url, module="pytest")

    @classmethod
    def tearDownClass(cls):
        try:
            if getattr(cls, "board", None) is not None:
                cls.board.close()
        finally:
            if cls.stack is not None:
                cls.stack.stop()

    def adapter_log(self):
        return "\nadapter log:\n" + self.stack.log("adapter.log")

    def test_post_and_wait_succeeds(self):
        seen = []
        req = self.board.post(template="true")
        self.assertEqual(req.entry_id.split(":")[0], "pytest")
        job = req.wait(JOB_TIMEOUT, on_status=lambda j: seen.append(j.status))
        self.assertEqual(job.status, "succeeded", self.adapter_log())
        self.assertEqual(job.exit_code, 0)
        self.assertEqual(job.job_id, req.job_id)
        self.assertEqual(job.request_entry_id, req.entry_id)
        self.assertEqual(job.account, "pytest")
        self.assertEqual(seen[-1], "succeeded")
        self.assertEqual(len(seen), len(set(seen)), f"on_status repeated a status: {seen}")
        self.assertIs(job.raise_for_status(), job)
        entry = self.board.get(req.entry_id)
        self.assertEqual(entry.status, "consumed")
        self.assertEqual(entry.topic, "compute.request")
        self.assertEqual(entry.data, {"template": "true"})
        job_entry = self.board.get(req.job_id)
        self.assertEqual((job_entry.topic, job_entry.parent_id, job_entry.source_module),
                         ("compute.job", req.entry_id, "compute"))

    def test_arguments_resources_and_priority(self):
        req = self.board.post(template="sleep", args=["0"], resources={"cpu_cores": 0.5, "memory": 0.1},
                              priority=7, deadline=time.time() + 3600, timeout=120)
        job = req.wait(JOB_TIMEOUT)
        self.assertEqual(job.status, "succeeded", self.adapter_log())
        self.assertEqual(job.priority, 7)

    def test_unknown_template_is_rejected(self):
        req = self.board.post(template="no-such-template")
        job = req.wait(JOB_TIMEOUT)  # a rejection is returned, not raised
        self.assertEqual(job.status, "rejected")
        self.assertEqual(job.reason_code, "unknown_template")
        self.assertEqual(job.code, "unknown_template")
        self.assertEqual(job.error.code, "unknown_template")
        with self.assertRaises(JobRejected) as cm:
            job.raise_for_status()
        self.assertEqual(cm.exception.code, "unknown_template")
        self.assertIs(cm.exception.job, job)

    def test_bad_argument_is_rejected_with_its_reason(self):
        job = self.board.post(template="sleep", args=["forever"]).wait(JOB_TIMEOUT)
        self.assertEqual(job.status, "rejected")
        self.assertNotEqual(job.reason_code, "")

    def test_cancel_after_queued(self):
        req = self.board.post(template="sleep", args=["30"])
        first = wait_until_known(req)
        self.assertIn(first.status, ("queued", "running"))
        self.assertTrue(req.cancel())
        job = req.wait(JOB_TIMEOUT)
        self.assertEqual(job.status, "cancelled", self.adapter_log())
        self.assertEqual(job.error.code, "cancelled")
        self.assertEqual(self.board.get(req.entry_id).status, "retracted")
        self.assertFalse(req.cancel(), "a second cancel has nothing to withdraw")

    def test_cancel_before_the_adapter_saw_it(self):
        req = self.board.post(template="sleep", args=["30"])
        self.assertTrue(req.cancel())
        self.assertEqual(req.wait(JOB_TIMEOUT).status, "cancelled", self.adapter_log())

    def test_wait_timeout_raises(self):
        req = self.board.post(template="sleep", args=["30"])
        try:
            with self.assertRaises(JobTimeout) as cm:
                req.wait(0.3)
            self.assertEqual(cm.exception.code, "timeout")
            self.assertIsInstance(cm.exception, TimeoutError)
        finally:
            req.cancel()
        self.assertEqual(req.wait(JOB_TIMEOUT).status, "cancelled")

    def test_idempotency_key_returns_the_same_job(self):
        key = "idem-" + uuid.uuid4().hex
        first = self.board.post(template="true", idempotency_key=key)
        second = self.board.post(template="true", idempotency_key=key)
        self.assertNotEqual(first.job_id, second.job_id)
        j1 = first.wait(JOB_TIMEOUT)
        j2 = second.wait(JOB_TIMEOUT)
        self.assertEqual(j1.status, "succeeded", self.adapter_log())
        self.assertEqual(j2.job_id, first.job_id)
        self.assertEqual(second.duplicate_of, first.job_id)
        self.assertIsNone(first.duplicate_of)
        # Another module's key never matches ours.
        other = self.board.post(template="true", idempotency_key=key, module="pytest-other")
        j3 = other.wait(JOB_TIMEOUT)
        self.assertEqual(j3.job_id, other.job_id)
        self.assertIsNone(other.duplicate_of)

    def test_invalid_arguments_write_nothing(self):
        with self.assertRaises(InvalidArgument):
            self.board.post(template="true", command=["/bin/true"])
        with self.assertRaises(InvalidArgument):
            self.board.post(template="true", module="not:a:module")
        with self.assertRaises(InvalidArgument) as cm:
            self.board.post(template="true", priority=12)
        self.assertEqual(cm.exception.code, "invalid_argument")

    def test_pressure_yields_metrics(self):
        kinds = set()
        for t in self.board.pressure(timeout=JOB_TIMEOUT):
            self.assertIn(t.topic, ("compute.resource_utilization", "compute.job_status", "compute.metrics"))
            self.assertEqual(t.entry.source_module, "compute")
            kinds.add(type(t.data))
            if isinstance(t.data, ResourceUtilization):
                self.assertTrue(0 <= t.data.max_utilization <= 1)
            if isinstance(t.data, ComputeMetrics):
                self.assertGreaterEqual(t.data.metric_count, 1)
                self.assertIn("pool_nodes", t.data.values)
            if {ComputeMetrics, JobStatusSummary, ResourceUtilization} <= kinds:
                break
        self.assertIn(ComputeMetrics, kinds)

    def test_pressure_follows_new_entries(self):
        got = None
        for t in self.board.pressure(topics=["compute.metrics"], latest=False, timeout=JOB_TIMEOUT):
            got = t
            break
        self.assertIsNotNone(got, "no new compute.metrics entry within the timeout")
        self.assertIsInstance(got.data, ComputeMetrics)

    def test_events_filtered_by_pattern(self):
        cursor = self.board.last_event_id()
        req = self.board.post(template="true")
        types, finished = [], None
        for ev in self.board.events("compute.job.*", last_id=cursor, timeout=JOB_TIMEOUT):
            types.append(ev.event_type)
            self.assertTrue(ev.event_type.startswith("compute.job."))
            if ev.event_type == "compute.job.finished" and ev.payload.get("job_id") == req.job_id:
                finished = ev
                break
        self.assertIsNotNone(finished, f"no compute.job.finished for {req.job_id}; saw {types}")
        self.assertEqual(finished.payload["status"], "succeeded")
        self.assertEqual(finished.source, "compute")
        # Resuming from an event's stream id replays what followed, and the
        # request's own added event is there from the cursor.
        added = next(iter(ev for ev in self.board.events("blackboard.entry.added", last_id=cursor, timeout=JOB_TIMEOUT)
                          if ev.payload.get("entry_id") == req.entry_id), None)
        self.assertIsNotNone(added)
        self.assertEqual(added.payload["priority"], "NORMAL")

    def test_query(self):
        topic = "pytest.q" + uuid.uuid4().hex[:8]
        ids = {}
        ids["low"] = self.board.post_entry(topic + ".a", {"n": 1}, priority=0, tags=["x"])
        ids["high"] = self.board.post_entry(topic + ".b", {"n": 2}, priority=2, tags=["x", "y"],
                                            confidence=0.5)
        ids["crit"] = self.board.post_entry(topic, {"n": 3}, priority=3, tags=["y"], module="qother")
        ids["old"] = self.board.post_entry(topic + ".a", {"n": 4}, priority=1, ttl_seconds=0)

        def q(**kw):
            return [e.entry_id for e in self.board.query(**kw)]

        self.assertEqual(q(topic=topic), [ids["crit"], ids["high"], ids["low"]])
        self.assertEqual(q(topic=topic + ".*"), [ids["high"], ids["low"]])
        self.assertEqual(q(topic=topic, include_expired=True),
                         [ids["crit"], ids["high"], ids["old"], ids["low"]])
        self.assertEqual(q(topic=topic, status="expired", include_expired=True), [ids["old"]])
        self.assertEqual(q(topic=topic, limit=1), [ids["crit"]])
        self.assertEqual(q(topic=topic, min_priority=2), [ids["crit"], ids["high"]])
        self.assertEqual(q(topic=topic, tags_any=["x"]), [ids["high"], ids["low"]])
        self.assertEqual(q(topic=topic, tags_all=["x", "y"]), [ids["high"]])
        self.assertEqual(q(topic=topic, min_confidence=0.9), [ids["crit"], ids["low"]])
        self.assertEqual(q(source_module="qother"), [ids["crit"]])
        self.assertEqual(q(topic=[topic + ".b", topic + ".a"]), [ids["high"], ids["low"]])
        self.assertEqual(q(topic="pytest.nothing-here"), [])
        self.assertEqual(q(topic=topic, since=time.time() + 60), [])
        e = self.board.query(topic=topic, limit=1)[0]
        self.assertEqual((e.data, e.tags, e.source_module), ({"n": 3}, ["y"], "qother"))
        # The adapter's own entries: job entries by topic and source.
        req = self.board.post(template="true")
        req.wait(JOB_TIMEOUT)
        jobs = self.board.query(topic="compute.job", source_module="compute")
        self.assertIn(req.job_id, [j.entry_id for j in jobs])
        mine = self.board.query(topic="compute.request", source_module="pytest", status="consumed")
        self.assertIn(req.entry_id, [e.entry_id for e in mine])


if __name__ == "__main__":
    unittest.main()
