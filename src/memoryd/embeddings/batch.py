"""Optional batch mode: embed documents through a provider's asynchronous batch API."""

from __future__ import annotations

import abc
import contextlib
import hashlib
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from ..config import BatchConfig
from ..errors import BatchPending, EmbeddingError
from ._limits import pack
from .base import DeadlineReached, Matrix

MAX_FAILURES = 2


class BatchProvider(Protocol):
    """What batch mode uses of its provider (`_remote.RemoteProvider`)."""

    @property
    def id(self) -> str: ...

    def fingerprint(self) -> str: ...

    def to_matrix(self, raw: Sequence[Any], expected: int) -> Matrix: ...

    def embed_online(
        self, texts: list[str], kind: Literal["document"], deadline: float | None = None
    ) -> Matrix: ...


class BatchJobFailed(EmbeddingError):
    """Raised inside batch mode when a job fails, expires or times out (its texts go online)."""


@dataclass
class JobStatus:
    id: str
    state: str
    done: bool
    error: str | None
    raw: Any


class BatchRunner(abc.ABC):
    """One provider's batch wire format: submit a job, poll it, read its vectors, cancel it."""

    #: Most inputs one job carries; more inputs make more jobs.
    max_job_inputs: int = 50_000

    def __init__(self, provider: Any) -> None:
        self.provider = provider

    @abc.abstractmethod
    def submit(self, texts: list[str]) -> str:
        """Create a job embedding `texts` as documents; returns its id."""

    @abc.abstractmethod
    def poll(self, job_id: str) -> JobStatus:
        """Current state of a job; `done` with `error` set means it failed."""

    @abc.abstractmethod
    def results(self, status: JobStatus, count: int) -> list[Any]:
        """The raw vectors of a finished job, in input order."""

    def cancel(self, job_id: str) -> None:  # noqa: B027 - optional
        """Best-effort cancellation of a job we gave up on."""


class BatchMode:
    """Per-provider batch state: config, failures, pending jobs."""

    def __init__(self, runner: BatchRunner, config: BatchConfig) -> None:
        self.runner = runner
        self.config = config
        self.failures = 0
        self.disabled_reason: str | None = None
        self.last_error: str | None = None
        self.jobs_submitted = 0
        self.jobs_completed = 0
        self._pending: dict[str, str] = {}
        #: jobs in flight for this provider, across every caller
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self.config.enabled and self.disabled_reason is None

    def record_failure(self, reason: str) -> None:
        with self._lock:
            self.failures += 1
            self.last_error = reason
            if self.failures >= MAX_FAILURES and self.disabled_reason is None:
                self.disabled_reason = (
                    f"batch mode off after {self.failures} failures; last: {reason}"
                )


def _digest(provider: BatchProvider, texts: Sequence[str]) -> str:
    h = hashlib.sha256(provider.fingerprint().encode())
    for text in texts:
        h.update(len(text).to_bytes(8, "little"))
        h.update(text.encode())
    return h.hexdigest()


def _finish(
    provider: BatchProvider, mode: BatchMode, job_id: str, count: int, deadline: float | None
) -> Matrix:
    """Poll a job to completion (or timeout) and return its normalized vectors."""
    timeout_at = time.monotonic() + mode.config.timeout_minutes * 60
    pause = mode.config.poll_interval_ms / 1000
    while True:
        status = mode.runner.poll(job_id)
        if status.done:
            break
        if time.monotonic() >= timeout_at:
            with contextlib.suppress(EmbeddingError):  # abandoned either way: this saves work
                mode.runner.cancel(job_id)
            raise BatchJobFailed(
                f"{provider.id} batch job {job_id} timed out after {mode.config.timeout_minutes:g} min (state {status.state})"
            )
        if not mode.config.wait:
            raise BatchPending(f"{provider.id} batch job {job_id} is {status.state}", [job_id])
        if deadline is not None and time.monotonic() + pause >= deadline:
            raise DeadlineReached
        time.sleep(pause)
    if status.error:
        raise BatchJobFailed(f"{provider.id} batch job {job_id} {status.state}: {status.error}")
    matrix = provider.to_matrix(mode.runner.results(status, count), count)
    with mode._lock:
        mode.jobs_completed += 1
    return matrix


def _one_job(
    provider: BatchProvider, mode: BatchMode, texts: list[str], deadline: float | None
) -> Matrix:
    key = _digest(provider, texts)
    with mode._slots:
        job_id = mode._pending.get(key)
        if job_id is None:
            job_id = mode.runner.submit(texts)
            with mode._lock:
                mode.jobs_submitted += 1
            mode._pending[key] = job_id
        try:
            matrix = _finish(provider, mode, job_id, len(texts), deadline)
        except (BatchPending, DeadlineReached):
            raise
        except BaseException:
            mode._pending.pop(key, None)
            raise
        mode._pending.pop(key, None)
        return matrix


def run_batch(
    provider: BatchProvider, mode: BatchMode, texts: list[str], deadline: float | None = None
) -> Matrix:
    """Embed `texts` as documents through batch jobs; ranges whose job failed are embedded online."""
    ranges = pack(texts, max_items=mode.runner.max_job_inputs, max_tokens=None)
    results: list[Matrix | None] = [None] * len(ranges)
    failures: list[EmbeddingError] = []
    pending: list[BatchPending] = []
    late: list[DeadlineReached] = []

    def run(slot: int) -> None:
        start, stop = ranges[slot]
        try:
            results[slot] = _one_job(provider, mode, texts[start:stop], deadline)
        except BatchPending as err:
            pending.append(err)
        except DeadlineReached as err:
            late.append(err)
        except EmbeddingError as err:
            failures.append(err)

    if len(ranges) == 1:
        run(0)
    else:  # the jobs wait on the provider side at once (`concurrency` bounds them)
        with ThreadPoolExecutor(len(ranges), thread_name_prefix="memoryd-batch") as pool:
            list(pool.map(run, range(len(ranges))))

    if failures:
        mode.record_failure(str(failures[0]))
    if pending:
        job_ids = [job for p in pending for job in p.job_ids]
        raise BatchPending(
            f"{provider.id}: {len(job_ids)} batch job(s) still running; sync again later", job_ids
        )
    if late:
        raise late[0]
    for slot, (start, stop) in enumerate(ranges):
        if results[slot] is None:
            results[slot] = provider.embed_online(texts[start:stop], "document", deadline)
    return np.concatenate([r for r in results if r is not None])
