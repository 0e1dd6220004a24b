"""The asyncio twin (computeboard.aio) against a real redis-server and adapter."""
from __future__ import annotations

import asyncio
import unittest
import uuid

from computeboard import ComputeMetrics, JobTimeout
from computeboard.aio import AsyncBoard

from .harness import JOB_TIMEOUT, Stack


class AsyncBoardTest(unittest.IsolatedAsyncioTestCase):
    stack = None

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack().start()

    @classmethod
    def tearDownClass(cls):
        if cls.stack is not None:
            cls.stack.stop()

    async def asyncSetUp(self):
        # The test loop runs in debug mode; a loaded CI machine makes its
        # slow-callback notes (0.1 s) noise.
        asyncio.get_running_loop().slow_callback_duration = 5.0
        self.board = AsyncBoard(self.stack.url, module="pyaio")

    async def asyncTearDown(self):
        await self.board.close()

    async def test_post_and_wait(self):
        seen = []

        async def on_status(job):
            seen.append(job.status)

        req = await self.board.post(template="true")
        job = await req.wait(JOB_TIMEOUT, on_status=on_status)
        self.assertEqual(job.status, "succeeded", self.stack.log("adapter.log"))
        self.assertEqual(job.job_id, req.job_id)
        self.assertEqual(seen[-1], "succeeded")
        self.assertEqual((await self.board.get(req.entry_id)).status, "consumed")

    async def test_rejected(self):
        job = await (await self.board.post(template="missing")).wait(JOB_TIMEOUT)
        self.assertEqual((job.status, job.reason_code), ("rejected", "unknown_template"))

    async def test_cancel(self):
        req = await self.board.post(template="sleep", args=["30"])
        for _ in range(int(JOB_TIMEOUT / 0.02)):
            if await req.status() is not None:
                break
            await asyncio.sleep(0.02)
        self.assertTrue(await req.cancel())
        job = await req.wait(JOB_TIMEOUT)
        self.assertEqual(job.status, "cancelled", self.stack.log("adapter.log"))
        self.assertFalse(await req.cancel())

    async def test_wait_timeout(self):
        req = await self.board.post(template="sleep", args=["30"])
        try:
            with self.assertRaises(JobTimeout):
                await req.wait(0.3)
        finally:
            await req.cancel()

    async def test_idempotency(self):
        key = "aio-" + uuid.uuid4().hex
        a = await self.board.post(template="true", idempotency_key=key)
        b = await self.board.post(template="true", idempotency_key=key)
        ja, jb = await asyncio.gather(a.wait(JOB_TIMEOUT), b.wait(JOB_TIMEOUT))
        self.assertEqual(jb.job_id, a.job_id)
        self.assertEqual(b.duplicate_of, a.job_id)

    async def test_streams_and_query(self):
        cursor = await self.board.last_event_id()
        req = await self.board.post(template="true")
        finished = None
        async for ev in self.board.events("compute.job.finished", last_id=cursor, timeout=JOB_TIMEOUT):
            if ev.payload.get("job_id") == req.job_id:
                finished = ev
                break
        self.assertIsNotNone(finished)
        got = None
        async for t in self.board.pressure(topics=["compute.metrics"], timeout=JOB_TIMEOUT):
            got = t
            break
        self.assertIsInstance(got.data, ComputeMetrics)
        jobs = await self.board.query(topic="compute.job", limit=500)
        self.assertIn(req.job_id, [e.entry_id for e in jobs])


if __name__ == "__main__":
    unittest.main()
