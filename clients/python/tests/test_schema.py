"""Unit tests without Redis: the dataclasses against wire/schema/*.json, and
the wire helpers."""
from __future__ import annotations

import dataclasses
import json
import os
import unittest

from computeboard import (ComputeRequest, InvalidArgument, JobData, JobRejected, ResourceRequirements,
                          job_id_for)
from computeboard import _wire as w
from computeboard.types import SCHEMA_TYPES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCHEMA_DIR = os.path.join(REPO, "wire", "schema")


def load_schema(name):
    with open(os.path.join(SCHEMA_DIR, name)) as f:
        return json.load(f)


def resolve(doc, pointer):
    for part in [p for p in pointer.split("/") if p]:
        doc = doc[part.replace("~1", "/").replace("~0", "~")]
    return doc


@unittest.skipUnless(os.path.isdir(SCHEMA_DIR), "wire/schema not found (not a checkout)")
class SchemaAgreement(unittest.TestCase):
    def test_fields_match_schema_properties(self):
        for cls in SCHEMA_TYPES:
            with self.subTest(cls=cls.__name__):
                file, pointer = cls.__schema__
                props = set(resolve(load_schema(file), pointer)["properties"])
                fields = {f.name for f in dataclasses.fields(cls)}
                client = set(cls.__client_fields__)
                self.assertTrue(client <= fields, f"{cls.__name__}: stray __client_fields__")
                self.assertEqual(fields - client, props,
                                 f"{cls.__name__} vs {file}#{pointer}: missing "
                                 f"{sorted(props - fields)}, extra {sorted(fields - client - props)}")

    def test_required_job_fields_have_no_default_surprises(self):
        required = set(load_schema("compute-job.v1.schema.json")["required"])
        self.assertTrue(required <= {f.name for f in dataclasses.fields(JobData)})

    def test_every_schema_file_is_known(self):
        # A new schema file should get a dataclass (or be listed here on purpose).
        covered = {cls.__schema__[0] for cls in SCHEMA_TYPES}
        not_client_side = {"dead-letter.v1.schema.json", "inbox-message.v1.schema.json",
                           "inbox-message.v2.schema.json"}
        files = {f for f in os.listdir(SCHEMA_DIR) if f.endswith(".json")}
        self.assertEqual(files - covered - not_client_side, set())

    def test_doc_job_example_round_trips(self):
        d = {"job_id": "e4948e21da6913daf8d6921080e285fc", "request_entry_id": "m:" + "0" * 32,
             "idempotency_key": "", "account": "reasoning", "priority": 6, "status": "rejected",
             "attempt": 0, "exit_code": None,
             "error": {"code": "unknown_field", "message": "wire: unknown_field: queue"},
             "reason_code": "unknown_field", "submitted_at": 1.0, "started_at": None,
             "finished_at": 2.0, "node": "", "stdout_path": "", "stderr_path": "",
             "explanation": None, "some_future_key": 7}
        job = JobData.from_dict(d)
        self.assertEqual(job.extra, {"some_future_key": 7})
        self.assertEqual(job.code, "unknown_field")
        self.assertTrue(job.terminal)
        self.assertEqual(job.to_dict(), d)
        with self.assertRaises(JobRejected) as cm:
            job.raise_for_status()
        self.assertEqual(cm.exception.code, "unknown_field")


class WireHelpers(unittest.TestCase):
    def test_job_id(self):
        import hashlib
        eid = "m:" + "ab" * 16
        self.assertEqual(job_id_for(eid), hashlib.sha256(("compute.job:" + eid).encode()).hexdigest()[:32])

    def test_request_data(self):
        d = w.make_request_data("t", None, ["1"], ResourceRequirements(cpu_cores=2), 7, 1e9, "k",
                                None, {"account": "a", "timeout": None})
        self.assertEqual(d, {"template": "t", "arguments": ["1"], "resource_requirements": {"cpu_cores": 2},
                             "priority": 7, "deadline": 1e9, "idempotency_key": "k", "account": "a"})
        with self.assertRaises(InvalidArgument):
            w.make_request_data("t", ["x"], None, None, None, None, None, None, {})
        with self.assertRaises(InvalidArgument):
            w.make_request_data(None, None, None, None, None, None, None, None, {})
        with self.assertRaises(InvalidArgument):
            w.make_request_data("t", None, None, None, 10, None, None, None, {})
        self.assertEqual(ComputeRequest(template="x", payload={"a": 1}).to_dict(),
                         {"template": "x", "payload": {"a": 1}})

    def test_post_plan_lane_and_fields(self):
        p = w.PostPlan("b", w.REQUEST_TOPIC, {"template": "t"}, "mod", priority=2, ttl_seconds=5)
        self.assertEqual(p.lane, 6)
        self.assertTrue(p.entry_id.startswith("mod:") and len(p.entry_id) == 4 + 32)
        self.assertEqual(p.hash["ttl_seconds"], "5.0")
        self.assertEqual(json.loads(p.hash["tags"]), [])
        p = w.PostPlan("b", w.REQUEST_TOPIC, {"template": "t", "priority": 9}, "mod")
        self.assertEqual(p.lane, 9)
        with self.assertRaises(InvalidArgument):
            w.PostPlan("b", w.REQUEST_TOPIC, {"template": "t"}, "bad:module")
        with self.assertRaises(InvalidArgument):
            w.PostPlan("b", w.REQUEST_TOPIC, {"template": "t", "x": float("nan")}, "m")

    def test_topic_matches(self):
        self.assertTrue(w.topic_matches("compute", "compute.job"))
        self.assertTrue(w.topic_matches("compute.job", "compute.job"))
        self.assertFalse(w.topic_matches("compute.job", "compute.job_status"))
        self.assertFalse(w.topic_matches("compute.*", "compute"))
        self.assertTrue(w.topic_matches("compute.*", "compute.metrics"))


if __name__ == "__main__":
    unittest.main()
