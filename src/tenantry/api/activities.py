"""Tenant API: activities (immutable versions of a tenant's code) and their tasks (ADR
0013). Thin over ``activities.tasks.ActivityStore``: the bundle's and the settings' rules
are theirs, answered here as 400 ``validation_error``; the bodies, and what a version is
answered as, are ``api/activity_bodies.py``. Lists page as every list does
(``api/pagination.py``); a task's attempt log is its own list."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from tenantry.activities.code.versions import NOT_FOUND, ActivityVersion
from tenantry.activities.tasks.store import NOT_FOUND as TASK_NOT_FOUND
from tenantry.agents import flags
from tenantry.api.activity_bodies import (
    NAME_RE,
    ActivityList,
    ActivityOut,
    AttemptList,
    CreateActivity,
    EnqueueTask,
    TaskList,
    TaskOut,
    TaskStarted,
    VersionBody,
    activity_out,
    attempt_out,
    summary_out,
    task_out,
)
from tenantry.api.auth import AgentsManager, PlatformDep, RunsReader, RunsWriter
from tenantry.api.fields import INT4_MAX
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by, matching
from tenantry.api.params import idempotency_header, parse_or_404, positive_int4_or_404
from tenantry.api.platform import Platform
from tenantry.api.run_bodies import OVERLOADED
from tenantry.errors import NotFound
from tenantry.ids import RunId, TenantId
from tenantry.runs.events import RunStatus
from tenantry.store.results import Admitted, platform_error

router = APIRouter(tags=["activities"])

_ACTIVITY_CURSOR = matching(NAME_RE)


#: An attempt page's cursor: its last attempt's seq. Any seq is a position (past the
#: last attempt, the page is empty), so one past an int4 reads as the largest.
_SEQ_CURSOR = r"^[0-9]{1,10}$"


def _seq_cursor(text: str) -> int:
    return min(int(text), INT4_MAX)


async def _flagged_out(p: Platform, tenant: TenantId, found: ActivityVersion) -> ActivityOut:
    return activity_out(found, await flags.review_flag(p.db, tenant, found.agent_id,
                                                       found.version))


def _name_or_404(name: str) -> str:
    if not re.fullmatch(NAME_RE, name):
        raise NotFound(NOT_FOUND)
    return name


_PUBLISH_CONFLICT = {"description": "`conflict` (with `field`): the name is one of the "
                                    "tenant's agents, or `secrets` names a secret the "
                                    "tenant does not have."}
_THE_VERSION = {"name": "$response.body#/name", "version": "$response.body#/version"}
_PUBLISHED = links(
    GetActivity=to("GET", "/v1/activities/{name}", "Its latest version.",
                   parameters={"name": "$response.body#/name"}),
    GetActivityVersion=to("GET", "/v1/activities/{name}/versions/{version}",
                          "The version just published.", parameters=_THE_VERSION),
    NewActivityVersion=to("POST", "/v1/activities/{name}/versions", "Publish its next "
                          "version.", parameters={"name": "$response.body#/name"}),
    EnqueueTask=to("POST", "/v1/activity-tasks", "Run the version just published.",
                   body={"activity": "$response.body#/name",
                         "version": "$response.body#/version"}))


@router.post("/v1/activities", status_code=201, response_model=ActivityOut, responses={
    201: _PUBLISHED, 409: _PUBLISH_CONFLICT})
async def create_activity(
    body: CreateActivity, response: Response, tenant: AgentsManager, p: PlatformDep,
) -> ActivityOut:
    """Publish version 1, or the next version when the activity exists."""
    found = await p.activities.publish(tenant, body.name, body.bundle(), body.settings())
    response.headers["Location"] = f"/v1/activities/{found.name}/versions/{found.version}"
    return activity_out(found)


@router.post("/v1/activities/{name}/versions", status_code=201, response_model=ActivityOut,
             responses={201: _PUBLISHED, 409: _PUBLISH_CONFLICT})
async def create_version(
    name: str, body: VersionBody, response: Response, tenant: AgentsManager, p: PlatformDep,
) -> ActivityOut:
    """The activity's next version; 404 when it has none yet (create it with POST
    /v1/activities)."""
    await p.activities.version(tenant, _name_or_404(name))
    found = await p.activities.publish(tenant, name, body.bundle(), body.settings())
    response.headers["Location"] = f"/v1/activities/{found.name}/versions/{found.version}"
    return activity_out(found)


_ActivityPage = Annotated[PageRequest, Depends(keyed_by(NAME_RE))]


@router.get("/v1/activities", response_model=ActivityList)
async def list_activities(page: _ActivityPage, tenant: RunsReader, p: PlatformDep) -> ActivityList:
    """The tenant's activities by name, each with its latest version."""
    found = await p.activities.activities(tenant, after=page.position(_ACTIVITY_CURSOR),
                                          limit=page.limit)
    return page.answer(ActivityList, found, summary_out, key=lambda a: a.name)


@router.get("/v1/activities/{name}", response_model=ActivityOut)
async def get_activity(name: str, tenant: RunsReader, p: PlatformDep) -> ActivityOut:
    """Get an activity: its latest version."""
    return await _flagged_out(p, tenant, await p.activities.version(tenant, _name_or_404(name)))


@router.get("/v1/activities/{name}/versions/{version}", response_model=ActivityOut)
async def get_activity_version(
    name: str, version: str, tenant: RunsReader, p: PlatformDep,
) -> ActivityOut:
    """Get a version of an activity.

    Its entrypoint, files, digest and settings as that version was published."""
    number = positive_int4_or_404(version, NOT_FOUND)
    return await _flagged_out(p, tenant,
                              await p.activities.version(tenant, _name_or_404(name), number))


_THE_TASK = {"task_id": "$response.body#/task_id"}


@router.post("/v1/activity-tasks", status_code=202, response_model=TaskStarted, responses={
    202: links(GetTask=to("GET", "/v1/activity-tasks/{task_id}", "The task just enqueued.",
                          parameters=_THE_TASK),
               TaskAttempts=to("GET", "/v1/activity-tasks/{task_id}/attempts",
                               "Its attempts.", parameters=_THE_TASK),
               CancelTask=to("POST", "/v1/activity-tasks/{task_id}/cancel", "Cancel it.",
                             parameters=_THE_TASK)),
    409: {"description": "`conflict`: the Idempotency-Key was used with a different task "
                         "(`tombstoned: true`: by a task since deleted); `tenant_erased`: "
                         "the tenant is being erased and admits nothing; "
                         "`admissions_paused` (with `paused_at`): an operator paused the "
                         "tenant's admissions"},
    429: {"description": "`quota_exceeded`: the tenant has `max_queued` runs and tasks not "
                         "yet ended; `budget_exhausted`: its monthly spend cap is reached"},
    503: OVERLOADED,
})
async def enqueue_task(
    body: EnqueueTask, response: Response, tenant: RunsWriter, p: PlatformDep,
    idempotency_key: str | None = idempotency_header(
        "Retrying with the same key and body returns the same task."),
) -> TaskStarted:
    """Enqueue an activity task.

    Queues a task of the activity (its latest version, or the one named) with an input; a
    dispatcher runs it in a sandbox. With an `Idempotency-Key`, a retry answers the same
    task."""
    result = await p.activities.enqueue(tenant, body.activity, body.input,
                                        version=body.version, idempotency_key=idempotency_key)
    if not isinstance(result, Admitted):
        raise platform_error(result)
    task = await p.activities.get(tenant, result.task_id)
    response.headers["Location"] = f"/v1/activity-tasks/{result.task_id}"
    return TaskStarted(task_id=str(result.task_id), status=result.status.value,
                       activity=task.name, version=task.version,
                       task_url=f"/v1/activity-tasks/{result.task_id}")


_TaskPage = Annotated[PageRequest, Depends(keyed_by(RunId.pattern()))]


@router.get("/v1/activity-tasks", response_model=TaskList)
async def list_tasks(
    page: _TaskPage, tenant: RunsReader, p: PlatformDep,
    status: RunStatus | None = Query(None, description="Only tasks in this status (a dead "
                                                       "letter's is `waiting`)."),
    dead_lettered: bool | None = Query(None, description="true: only dead letters; false: "
                                                         "none of them."),
    activity: str | None = Query(None, max_length=128, pattern=NAME_RE,
                                 description="Only tasks of this activity."),
) -> TaskList:
    """The tenant's activity tasks, newest first."""
    found = await p.activities.tasks(tenant, before=page.position(RunId.parse), status=status,
                                     dead_lettered=dead_lettered, activity=activity,
                                     limit=page.limit)
    return page.answer(TaskList, found, task_out, key=lambda t: str(t.task_id))


@router.get("/v1/activity-tasks/{task_id}", response_model=TaskOut)
async def get_task(task_id: str, tenant: RunsReader, p: PlatformDep) -> TaskOut:
    """Get an activity task.

    Its status, result or last error, attempts so far and whether it was dead-lettered."""
    task = parse_or_404(RunId, task_id, TASK_NOT_FOUND)
    return task_out(await p.activities.get(tenant, task))


@router.post("/v1/activity-tasks/{task_id}/requeue", response_model=TaskOut, responses={
    409: {"description": "`conflict`: only a dead-lettered task is requeued."}})
async def requeue_task(task_id: str, tenant: RunsWriter, p: PlatformDep) -> TaskOut:
    """Send a dead letter back to the queue with a fresh count of attempts."""
    task = parse_or_404(RunId, task_id, TASK_NOT_FOUND)
    await p.activities.requeue(tenant, task)
    return task_out(await p.activities.get(tenant, task))


_AttemptPage = Annotated[PageRequest, Depends(keyed_by(_SEQ_CURSOR))]


@router.get("/v1/activity-tasks/{task_id}/attempts", response_model=AttemptList)
async def list_attempts(
    task_id: str, page: _AttemptPage, tenant: RunsReader, p: PlatformDep,
) -> AttemptList:
    """The task's attempt log, oldest first: each attempt's outcome, exit code, whether it
    killed its sandbox, and its output as capped for the log."""
    task = parse_or_404(RunId, task_id, TASK_NOT_FOUND)
    after = page.position(_seq_cursor) or 0
    found = await p.activities.attempts(tenant, task, after=after, limit=page.limit)
    return page.answer(AttemptList, found, attempt_out, key=lambda a: str(a.seq))


@router.post("/v1/activity-tasks/{task_id}/cancel", response_model=TaskOut, responses={
    409: {"description": "`conflict`: the task already ended (finished, failed or "
                         "cancelled); `task_status` says how."}})
async def cancel_task(task_id: str, tenant: RunsWriter, p: PlatformDep) -> TaskOut:
    """Cancel a task. Queued, waiting for its backoff or dead-lettered: `cancelled` at
    once. Running: the attempt in flight is not killed; `cancel_requested` is set, no
    further attempt starts, and the task ends `cancelled` — unless that attempt completes,
    whose result is kept (`finished`). Asking again while it runs changes nothing."""
    task = parse_or_404(RunId, task_id, TASK_NOT_FOUND)
    return task_out(await p.activities.cancel(tenant, task))
