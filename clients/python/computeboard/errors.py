"""Exceptions. Every one carries a reason code (``.code``) and a message.

``code`` is a wire-format reason code (docs/wire-format.md §6) such as
``unknown_template``, an ``error.code`` word such as ``exit_status`` or
``cancelled``, or one of the client's own: ``timeout`` (wait ran out),
``invalid_argument`` (the client refused a call before anything was
written).
"""
from __future__ import annotations

from typing import Any, Optional


class ComputeboardError(Exception):
    """Base class: ``code`` (a reason code) and ``message``."""

    def __init__(self, code: str, message: str = "", job: Optional[Any] = None):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        #: the JobData this error is about, when there is one
        self.job = job


class InvalidArgument(ComputeboardError, ValueError):
    """The client refused a call (bad module name, both template and command...).
    Nothing was written to the board."""

    def __init__(self, message: str):
        super().__init__("invalid_argument", message)


class JobTimeout(ComputeboardError, TimeoutError):
    """``Request.wait`` ran out of time; ``.job`` is the last data seen (or None)."""

    def __init__(self, message: str, job: Optional[Any] = None):
        super().__init__("timeout", message, job)


class JobError(ComputeboardError):
    """A job ended without succeeding (raised by ``JobData.raise_for_status``)."""


class JobRejected(JobError):
    """status ``rejected``: ``code`` is the reason code (§6)."""


class JobFailed(JobError):
    """status ``failed``: ``code`` is ``error.code`` (``exit_status``, ``timeout``, ...)."""


class JobCancelled(JobError):
    """status ``cancelled``."""


class JobExpired(JobError):
    """status ``expired``."""


def error_for_job(job: Any) -> Optional[JobError]:
    """The exception for a terminal job that did not succeed, else None."""
    cls = {"rejected": JobRejected, "failed": JobFailed,
           "cancelled": JobCancelled, "expired": JobExpired}.get(job.status)
    if cls is None:
        return None
    code = job.reason_code or (job.error.code if job.error else "") or job.status
    msg = job.error.message if job.error else ""
    return cls(code, f"job {job.job_id} {job.status}" + (f": {msg}" if msg else ""), job)
