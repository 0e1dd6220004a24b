"""Typed views of the wire format's JSON documents (wire/schema/*.json).

Each dataclass names its schema in ``__schema__`` (file, JSON pointer to the
object whose ``properties`` it mirrors); a unit test checks that the field
names agree with the schema's properties. Fields listed in
``__client_fields__`` are the client's own (documented additive keys, or a
bag for unknown keys): readers must ignore keys they do not know, so
``from_dict`` keeps those in ``extra`` instead of failing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Tuple

TERMINAL = frozenset({"succeeded", "failed", "rejected", "expired", "cancelled"})
PRIORITY_NAMES = ("LOW", "NORMAL", "HIGH", "CRITICAL")
LOW, NORMAL, HIGH, CRITICAL = 0, 1, 2, 3


def _names(cls) -> List[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _omit_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


@dataclass
class ResourceRequirements:
    """``resource_requirements`` of a request (per job / gang member)."""
    __schema__: ClassVar[Tuple[str, str]] = ("compute-request.v1.schema.json", "/$defs/resources")
    __client_fields__: ClassVar[Tuple[str, ...]] = ()

    cpu_cores: Optional[float] = None
    memory: Optional[float] = None  # GB
    gpu_count: Optional[int] = None
    gpu_memory: Optional[float] = None  # GB per GPU
    gpu_model: Optional[str] = None
    mig_profile: Optional[str] = None
    storage: Optional[float] = None  # GB
    storage_tier: Optional[str] = None
    network_bandwidth: Optional[float] = None  # Mbps
    numa_local: Optional[bool] = None

    def to_dict(self) -> Dict[str, Any]:
        return _omit_none(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ResourceRequirements":
        return cls(**{k: v for k, v in d.items() if k in _names(cls)})


@dataclass
class ComputeRequest:
    """``data`` of a ``compute.request`` entry (strict: None fields are omitted)."""
    __schema__: ClassVar[Tuple[str, str]] = ("compute-request.v1.schema.json", "")
    __client_fields__: ClassVar[Tuple[str, ...]] = ()

    version: Optional[int] = None
    name: Optional[str] = None
    template: Optional[str] = None
    command: Optional[List[str]] = None
    arguments: Optional[List[str]] = None
    environment: Optional[Dict[str, str]] = None
    resource_requirements: Optional[ResourceRequirements] = None
    priority: Optional[int] = None  # 0..9, 9 most urgent
    account: Optional[str] = None
    deadline: Optional[float] = None  # epoch seconds
    estimated_duration: Optional[float] = None
    timeout: Optional[float] = None
    max_retries: Optional[int] = None
    idempotency_key: Optional[str] = None
    node_selector: Optional[Dict[str, str]] = None
    gang_id: Optional[str] = None
    gang_size: Optional[int] = None
    provider: Optional[str] = None  # a provider's name: only its nodes
    placement: Optional[str] = None  # best-fit, first-fit, worst-fit, balanced, most-allocated, cheapest
    payload: Any = None

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if isinstance(v, ResourceRequirements):
                v = v.to_dict()
            elif isinstance(v, (list, tuple)):
                v = list(v)
            elif isinstance(v, dict):
                v = dict(v)
            d[f.name] = v
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ComputeRequest":
        kw = {k: v for k, v in d.items() if k in _names(cls)}
        if isinstance(kw.get("resource_requirements"), dict):
            kw["resource_requirements"] = ResourceRequirements.from_dict(kw["resource_requirements"])
        return cls(**kw)


@dataclass
class JobErrorInfo:
    """``error`` of a job: a reason code or error word, and a message."""
    __schema__: ClassVar[Tuple[str, str]] = ("compute-job.v1.schema.json", "/$defs/error")
    __client_fields__: ClassVar[Tuple[str, ...]] = ()

    code: str = ""
    message: str = ""


@dataclass
class JobData:
    """``data`` of a ``compute.job`` entry."""
    __schema__: ClassVar[Tuple[str, str]] = ("compute-job.v1.schema.json", "")
    __client_fields__: ClassVar[Tuple[str, ...]] = ("duplicate_of", "extra")

    job_id: str = ""
    request_entry_id: str = ""
    idempotency_key: str = ""
    account: str = ""
    priority: int = 0
    status: str = ""
    attempt: int = 0
    exit_code: Optional[int] = None
    error: Optional[JobErrorInfo] = None
    reason_code: str = ""
    submitted_at: Optional[float] = None
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    node: str = ""
    stdout_path: str = ""
    stderr_path: str = ""
    explanation: Optional[Dict[str, Any]] = None
    #: set on a duplicate's own job entry: the original job's id (§5)
    duplicate_of: Optional[str] = None
    #: keys this version of the client does not know
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @property
    def code(self) -> str:
        """The reason code of a rejection, else ``error.code``, else ``""``."""
        return self.reason_code or (self.error.code if self.error else "")

    def raise_for_status(self) -> "JobData":
        """Raise JobRejected/JobFailed/JobCancelled/JobExpired unless the job
        succeeded (or is not terminal yet); returns self."""
        from .errors import error_for_job
        err = error_for_job(self)
        if err is not None:
            raise err
        return self

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "JobData":
        names = set(_names(cls)) - {"extra"}
        kw = {k: v for k, v in d.items() if k in names}
        if isinstance(kw.get("error"), dict):
            e = kw["error"]
            kw["error"] = JobErrorInfo(code=e.get("code", ""), message=e.get("message", ""))
        return cls(extra={k: v for k, v in d.items() if k not in names}, **kw)

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        extra = d.pop("extra")
        if d["duplicate_of"] is None:
            del d["duplicate_of"]
        d.update(extra)
        return d


@dataclass
class Entry:
    """A blackboard entry (canonical form, §2)."""
    __schema__: ClassVar[Tuple[str, str]] = ("entry.schema.json", "")
    __client_fields__: ClassVar[Tuple[str, ...]] = ()

    entry_id: str
    topic: str
    data: Any
    source_module: str
    timestamp: float
    confidence: float
    priority: int
    status: str
    ttl_seconds: Optional[float]
    tags: List[str]
    parent_id: Optional[str]
    metadata: Dict[str, Any]

    def expired(self, now: float) -> bool:
        return self.ttl_seconds is not None and now - self.timestamp > self.ttl_seconds


@dataclass
class Event:
    """One event of the events stream, payload decoded (§7.2)."""
    __schema__: ClassVar[Tuple[str, str]] = ("events.v1.schema.json", "")
    __client_fields__: ClassVar[Tuple[str, ...]] = ("stream_id",)

    event_id: str
    event_type: str
    source: str
    timestamp: float
    payload: Dict[str, Any]
    #: the stream id: pass it as ``last_id`` to resume after this event
    stream_id: str = ""


@dataclass
class ResourceUtilization:
    """``data`` of ``compute.resource_utilization``: fractions 0..1."""
    __schema__: ClassVar[Tuple[str, str]] = ("compute-metrics.v1.schema.json", "/$defs/resource_utilization")
    __client_fields__: ClassVar[Tuple[str, ...]] = ("utilization",)

    max_utilization: float = 0.0
    #: fraction by resource (cpu, memory, gpu, ...)
    utilization: Dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ResourceUtilization":
        return cls(max_utilization=d.get("max_utilization", 0.0),
                   utilization={k: v for k, v in d.items() if k != "max_utilization"})


@dataclass
class JobStatistics:
    __schema__: ClassVar[Tuple[str, str]] = ("compute-metrics.v1.schema.json", "/$defs/job_status/properties/statistics")
    __client_fields__: ClassVar[Tuple[str, ...]] = ()

    jobs_submitted: int = 0
    jobs_completed: int = 0
    jobs_failed: int = 0
    jobs_cancelled: int = 0
    average_wait_time: float = 0.0
    average_turnaround_time: float = 0.0


@dataclass
class JobStatusSummary:
    """``data`` of ``compute.job_status``."""
    __schema__: ClassVar[Tuple[str, str]] = ("compute-metrics.v1.schema.json", "/$defs/job_status")
    __client_fields__: ClassVar[Tuple[str, ...]] = ()

    pending_jobs: int = 0
    running_jobs: int = 0
    completed_jobs: int = 0
    failed_jobs: int = 0
    cancelled_jobs: int = 0
    inbox_depth: int = 0
    statistics: JobStatistics = field(default_factory=JobStatistics)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "JobStatusSummary":
        names = set(_names(cls))
        kw = {k: v for k, v in d.items() if k in names}
        st = kw.get("statistics")
        if isinstance(st, dict):
            kw["statistics"] = JobStatistics(**{k: v for k, v in st.items() if k in _names(JobStatistics)})
        return cls(**kw)


@dataclass
class ComputeMetrics:
    """``data`` of ``compute.metrics``: metric_count and up to 20 named values."""
    __schema__: ClassVar[Tuple[str, str]] = ("compute-metrics.v1.schema.json", "/$defs/metrics")
    __client_fields__: ClassVar[Tuple[str, ...]] = ("values",)

    metric_count: int = 0
    values: Dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ComputeMetrics":
        return cls(metric_count=d.get("metric_count", 0),
                   values={k: v for k, v in d.items() if k != "metric_count"})


TELEMETRY_TYPES = {
    "compute.resource_utilization": ResourceUtilization,
    "compute.job_status": JobStatusSummary,
    "compute.metrics": ComputeMetrics,
}
TELEMETRY_TOPICS = tuple(TELEMETRY_TYPES)


@dataclass
class Telemetry:
    """One telemetry entry as ``Board.pressure()`` yields it: ``data`` is a
    ResourceUtilization, JobStatusSummary or ComputeMetrics by topic."""
    topic: str
    data: Any
    entry: Entry

    @classmethod
    def from_entry(cls, e: Entry) -> "Telemetry":
        typ = TELEMETRY_TYPES[e.topic]
        return cls(topic=e.topic, data=typ.from_dict(e.data if isinstance(e.data, dict) else {}), entry=e)


SCHEMA_TYPES = (ResourceRequirements, ComputeRequest, JobErrorInfo, JobData, Entry, Event,
                ResourceUtilization, JobStatistics, JobStatusSummary, ComputeMetrics)
