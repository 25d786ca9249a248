"""The bodies of the activities API (``api/activities.py``): what a publish and an enqueue
take, with the bundle's and the settings' limits stated in the OpenAPI document, and what
versions, tasks and attempts are answered as. A version is answered by its digest and
its files' names and sizes, never by the code's bytes."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, JsonValue, PrivateAttr, field_validator, model_validator

from tenantry.activities.code.attempt import MAX_INPUT_BYTES
from tenantry.activities.code.bundle import MAX_BUNDLE_BYTES, MAX_FILES, MAX_PATH_CHARS, Bundle
from tenantry.activities.code.versions import (
    INTERNAL_NAMES,
    INTERNAL_SUFFIXES,
    MAX_BATCH_SECONDS,
    MAX_BATCH_TASKS,
    MAX_EGRESS,
    MAX_SECRETS,
    MAX_TIMEOUT_S,
    MAX_WARM_IDLE_S,
    ActivitySettings,
    ActivityVersion,
    BatchSettings,
    WarmSettings,
)
from tenantry.activities.tasks.attempt_egress import MAX_SHOWN
from tenantry.activities.tasks.store import ActivitySummary, ActivityTask, Attempt
from tenantry.agents import flags
from tenantry.api.agents import ReviewFlagOut
from tenantry.api.fields import (
    PUBLIC_HOST_PATTERN,
    Body,
    PositiveInt4,
    StoredJson,
    bounded_json,
)

# No '/': the name is a path segment of its routes.
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
ActivityName = Annotated[str, Field(pattern=NAME_RE)]
# A bundle path (Bundle's rules): relative, '/'-separated, no empty, '.' or '..' part, no
# backslash or NUL.
_PART = r"([^/\\\x00]*[^./\\\x00][^/\\\x00]*|\.\.\.+)"
FilePath = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS,
                                pattern=rf"^({_PART}/)*{_PART}$")]
# Base64 (standard alphabet, padded) of at most the bundle's limit (4 characters per 3
# bytes): what b64decode(validate=True) takes.
FileData = Annotated[str, Field(
    max_length=(MAX_BUNDLE_BYTES + 2) // 3 * 4,
    pattern=r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")]
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
#: '<module path>.py:<function>': Python identifiers, the module a file of the bundle.
Entrypoint = Annotated[str, Field(
    max_length=300, pattern=rf"^({_IDENTIFIER}/)*{_IDENTIFIER}\.py:{_IDENTIFIER}$")]
# The guest sets each secret as an environment variable: the vault name must be one.
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
ExitCode = Annotated[int, Field(ge=1, le=255)]


def _any_case(text: str) -> str:
    # JSON Schema patterns have no case-insensitive flag; hosts are compared in lower case.
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in text)


_INTERNAL = "|".join([*(rf"^(\*\.)?{_any_case(name)}" for name in INTERNAL_NAMES),
                      *(_any_case(suffix) for suffix in INTERNAL_SUFFIXES)])
#: An activity's egress entry: a public host name (a domain of two or more labels, never an
#: address, nothing local or internal by its name), `*.` its subdomains, an optional port.
PublicHost = Annotated[str, Field(
    max_length=253, pattern=PUBLIC_HOST_PATTERN,
    json_schema_extra={"not": {"pattern": rf"({_INTERNAL})(:[0-9]+)?$"}})]
_DEFAULTS = ActivitySettings()


class RetryBody(Body):
    max_attempts: int = Field(default=_DEFAULTS.max_attempts, ge=1, le=100)
    backoff_seconds: float = Field(default=_DEFAULTS.backoff_s, ge=0, le=86400,
                                   allow_inf_nan=False)


class BatchBody(Body):
    """One sandbox serves up to max_tasks queued tasks of this tenant and version in turn,
    while it is younger than max_seconds (ADR 0014)."""

    max_tasks: int = Field(ge=1, le=MAX_BATCH_TASKS)
    max_seconds: float = Field(gt=0, le=MAX_BATCH_SECONDS, allow_inf_nan=False)


class WarmBody(Body):
    """After a task its sandbox is kept paused for idle_seconds; the next task of this
    tenant and version wakes it (ADR 0014)."""

    idle_seconds: float = Field(gt=0, le=MAX_WARM_IDLE_S, allow_inf_nan=False)


class VersionBody(Body):
    """One immutable version: its code and how its attempts run."""

    files: dict[FilePath, FileData] = Field(
        min_length=1, max_length=MAX_FILES,
        description=f"Relative POSIX path → base64 contents; at most {MAX_FILES} files and "
                    f"{MAX_BUNDLE_BYTES} bytes decoded in all.")
    entrypoint: Entrypoint = Field(description="'<module>.py:<function>': the module is a "
                                               "file of the bundle.")
    timeout_seconds: float = Field(default=_DEFAULTS.timeout_s, gt=0, le=MAX_TIMEOUT_S,
                                   allow_inf_nan=False)
    retry: RetryBody = Field(default_factory=RetryBody)
    secrets: list[EnvName] = Field(default_factory=list, max_length=MAX_SECRETS,
                                   description="Vault secret names the tenant holds; only "
                                               "these reach the sandbox.")
    egress: list[PublicHost] = Field(default_factory=list, max_length=MAX_EGRESS,
                               description="Public hosts the code may reach.")
    retryable_exit_codes: list[ExitCode] = Field(default_factory=list, max_length=255)
    max_sandbox_deaths: int = Field(default=_DEFAULTS.max_sandbox_deaths, ge=1, le=100)
    heartbeat_timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S,
                                                    allow_inf_nan=False)
    batch: BatchBody | None = Field(
        default=None, description="Opt-in: one sandbox serves several queued tasks of this "
                                  "tenant and version. Default: a fresh sandbox per attempt.")
    warm: WarmBody | None = Field(
        default=None, description="Opt-in: keep the sandbox paused between tasks of this "
                                  "tenant and version. Default: destroyed after each attempt.")
    _bundle: Bundle | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _as_bundle(self) -> VersionBody:
        decoded: dict[str, bytes] = {}
        for path, text in self.files.items():
            try:
                decoded[path] = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"files[{path[:40]!r}] is not valid base64") from None
        self._bundle = Bundle(decoded, self.entrypoint)  # its ValueError is a 400 too
        return self

    def bundle(self) -> Bundle:
        assert self._bundle is not None  # set by validation
        return self._bundle

    def settings(self) -> ActivitySettings:
        return ActivitySettings(
            timeout_s=self.timeout_seconds, max_attempts=self.retry.max_attempts,
            backoff_s=self.retry.backoff_seconds, secrets=tuple(self.secrets),
            egress=tuple(self.egress), retryable_exit_codes=frozenset(self.retryable_exit_codes),
            max_sandbox_deaths=self.max_sandbox_deaths,
            heartbeat_timeout_s=self.heartbeat_timeout_seconds,
            batch=None if self.batch is None
            else BatchSettings(self.batch.max_tasks, self.batch.max_seconds),
            warm=None if self.warm is None else WarmSettings(self.warm.idle_seconds))


class CreateActivity(VersionBody):
    name: ActivityName


class FileOut(BaseModel):
    path: str
    size: int


class RetryOut(BaseModel):
    max_attempts: int
    backoff_seconds: float


class BatchOut(BaseModel):
    max_tasks: int
    max_seconds: float


class WarmOut(BaseModel):
    idle_seconds: float


class ActivityOut(BaseModel):
    name: str
    version: int
    digest: str = Field(description="sha256 over the files and the entrypoint.")
    entrypoint: str
    files: list[FileOut]
    size: int
    timeout_seconds: float
    heartbeat_timeout_seconds: float | None
    retry: RetryOut
    secrets: list[str]
    egress: list[str]
    retryable_exit_codes: list[int]
    max_sandbox_deaths: int
    batch: BatchOut | None = Field(description="null: no batching (a fresh sandbox per "
                                               "attempt unless warm).")
    warm: WarmOut | None = Field(description="null: the sandbox is destroyed after each "
                                             "attempt (unless batched).")
    flagged_for_review: ReviewFlagOut | None = Field(
        default=None,
        description="Set once this version's attempts had more refused egress attempts "
                    "than the operator's threshold (TENANTRY_EGRESS_FLAG_THRESHOLD), as for "
                    "agent versions; null otherwise.")


class EnqueueTask(Body):
    activity: ActivityName
    version: PositiveInt4 | None = Field(default=None, description="Default: the latest, "
                                                                   "pinned now.")
    input: StoredJson = Field(default=None, description=f"Any JSON, at most {MAX_INPUT_BYTES} "
                                                       "bytes; null means {}.")

    @field_validator("input")
    @classmethod
    def _bounded(cls, value: JsonValue) -> JsonValue:
        return bounded_json(value, "input", MAX_INPUT_BYTES)


class TaskStarted(BaseModel):
    task_id: str
    status: str
    activity: str
    version: int
    task_url: str


class TaskOut(BaseModel):
    task_id: str
    activity: str
    version: int
    status: str
    input: Any
    result: Any
    error: Any
    attempts: int
    last_error: str | None
    dead_lettered: bool = Field(description="Its attempts killed their sandbox "
                                            "max_sandbox_deaths times; it is not dispatched "
                                            "again until requeued.")
    created_at: datetime
    finished_at: datetime | None
    cancel_requested: bool = Field(description="A cancel was asked while an attempt ran: "
                                               "no further attempt starts.")
    egress_refused: int = Field(default=0, description="Egress attempts the sandbox's proxy "
                                                       "refused, over all its attempts (the "
                                                       "attempt log says which).")


class ActivitySummaryOut(BaseModel):
    name: str
    latest_version: int
    created_at: datetime = Field(description="When version 1 was published.")
    updated_at: datetime = Field(description="When the latest version was published.")


class ActivityList(BaseModel):
    data: list[ActivitySummaryOut]
    next_cursor: str | None


class TaskList(BaseModel):
    data: list[TaskOut]
    next_cursor: str | None


class EgressRefusalOut(BaseModel):
    host: str = Field(description="The host the code asked for, as it asked.")
    port: int
    reason_code: str = Field(description="not_allowed (not on the version's egress list), "
                                         "internal_address, metadata_address.")


class AttemptOut(BaseModel):
    seq: int = Field(description="The attempt's place in the task's event log.")
    attempt: int
    status: str = Field(description="completed, retryable or failed.")
    error: str | None
    exit_code: int | None
    killed_sandbox: bool = Field(description="A kill or crash ended it (what dead-letters "
                                             "a task).")
    stdout: str = Field(description="The step's output, capped for the log.")
    stderr: str
    duration_ms: float
    at: datetime
    egress_refused: list[EgressRefusalOut] = Field(
        default_factory=list,
        description=f"The first (at most {MAX_SHOWN}) egress attempts the sandbox's proxy "
                    "refused during this attempt, in order; each was answered 403.")
    egress_refused_more: int = Field(default=0, description="Refused egress attempts past "
                                                            "those listed.")
    egress_refused_by_reason: dict[str, int] = Field(
        default_factory=dict, description="All of the attempt's refused egress attempts, "
                                          "by reason code.")


class AttemptList(BaseModel):
    data: list[AttemptOut]
    next_cursor: str | None = Field(description="The last attempt's seq when the page is "
                                                "full.")


def activity_out(found: ActivityVersion, flag: flags.ReviewFlag | None = None) -> ActivityOut:
    s = found.settings
    return ActivityOut(
        name=found.name, version=found.version, digest=found.bundle.digest,
        entrypoint=found.bundle.entrypoint,
        files=[FileOut(path=p, size=len(d)) for p, d in sorted(found.bundle.files.items())],
        size=found.bundle.size, timeout_seconds=s.timeout_s,
        heartbeat_timeout_seconds=s.heartbeat_timeout_s,
        retry=RetryOut(max_attempts=s.max_attempts, backoff_seconds=s.backoff_s),
        secrets=list(s.secrets), egress=list(s.egress),
        retryable_exit_codes=sorted(s.retryable_exit_codes),
        max_sandbox_deaths=s.max_sandbox_deaths,
        batch=None if s.batch is None
        else BatchOut(max_tasks=s.batch.max_tasks, max_seconds=s.batch.max_seconds),
        warm=None if s.warm is None else WarmOut(idle_seconds=s.warm.idle_seconds),
        flagged_for_review=None if flag is None else ReviewFlagOut(
            reason=flag.reason, since=flag.since, refused_egress=flag.refused_egress))


def task_out(task: ActivityTask) -> TaskOut:
    return TaskOut(
        task_id=str(task.task_id), activity=task.name, version=task.version,
        status=task.status.value, input=task.input, result=task.result, error=task.error,
        attempts=task.attempts, last_error=task.last_error, dead_lettered=task.dead_lettered,
        created_at=task.created_at, finished_at=task.finished_at,
        cancel_requested=task.cancel_requested, egress_refused=task.egress_refused)


def summary_out(found: ActivitySummary) -> ActivitySummaryOut:
    return ActivitySummaryOut(name=found.name, latest_version=found.latest_version,
                              created_at=found.created_at, updated_at=found.updated_at)


def attempt_out(a: Attempt) -> AttemptOut:
    return AttemptOut(seq=a.seq, attempt=a.attempt, status=a.status, error=a.error,
                      exit_code=a.exit_code, killed_sandbox=a.killed_sandbox, stdout=a.stdout,
                      stderr=a.stderr, duration_ms=a.duration_ms, at=a.at,
                      egress_refused=[EgressRefusalOut(host=r.host, port=r.port,
                                                       reason_code=r.reason_code)
                                      for r in a.egress_refused],
                      egress_refused_more=a.egress_refused_more,
                      egress_refused_by_reason=a.egress_refused_by_reason)
