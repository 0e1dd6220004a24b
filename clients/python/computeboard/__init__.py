"""computeboard: a Python client for the computeboard compute adapter.

    from computeboard import Board
    board = Board("redis://127.0.0.1:6379/0", module="reasoning")
    job = board.post(template="summarize", args=["--lang", "en"]).wait(timeout=60)

It speaks the public wire format (docs/wire-format.md) with redis-py only.
The asyncio twin is computeboard.aio.AsyncBoard.
"""
from ._wire import job_id_for
from .client import Board, Request, connect
from .errors import (ComputeboardError, InvalidArgument, JobCancelled, JobError, JobExpired,
                     JobFailed, JobRejected, JobTimeout)
from .types import (CRITICAL, HIGH, LOW, NORMAL, TELEMETRY_TOPICS, TERMINAL, ComputeMetrics,
                    ComputeRequest, Entry, Event, JobData, JobErrorInfo, JobStatistics,
                    JobStatusSummary, ResourceRequirements, ResourceUtilization, Telemetry)

__version__ = "0.1.0"

__all__ = [
    "Board", "Request", "connect", "job_id_for",
    "ComputeboardError", "InvalidArgument", "JobTimeout", "JobError", "JobRejected",
    "JobFailed", "JobCancelled", "JobExpired",
    "ComputeRequest", "ResourceRequirements", "JobData", "JobErrorInfo", "Entry", "Event",
    "ResourceUtilization", "JobStatusSummary", "JobStatistics", "ComputeMetrics", "Telemetry",
    "TERMINAL", "TELEMETRY_TOPICS", "LOW", "NORMAL", "HIGH", "CRITICAL",
]
