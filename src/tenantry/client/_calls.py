"""Each API call as data — method, path, query, body, whether it is safe to repeat, how to
read the answer — so the sync and async clients send exactly the same requests.

The routes and bodies are the API's own (src/tenantry/api/runs.py, agents.py,
approvals.py, evaluations.py, the tenant's tool servers and secrets, its account: keys,
audit, users, exports, webhooks, own model accounts; docs/reference/api.md).
Ids and names are quoted into paths, so none can reach another route."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote

from tenantry.client.account import ApiKey, AuditEntry, IssuedApiKey, SignInLink, User
from tenantry.client.evaluations import Evaluation, EvaluationSummary, TestSet, TestSetSummary
from tenantry.client.exports import Export
from tenantry.client.model_accounts import ModelAccount
from tenantry.client.models import (
    Agent,
    AgentSummary,
    Approval,
    EventPage,
    Page,
    Promotion,
    Run,
    RunBlob,
    StartedRun,
)
from tenantry.client.tool_servers import Secret, ToolServer, ToolServerConnection
from tenantry.client.webhooks import RotatedWebhookSecret, WebhookDelivery, WebhookEndpoint

T = TypeVar("T")
ItemT = TypeVar("ItemT")

#: No body (a GET, a POST without one).
NO_BODY: Any = object()


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, str | int] | None = None
    body: Any = NO_BODY
    headers: Mapping[str, str] | None = None
    #: Safe to send again after the request went out (GETs, cancel, a keyed run start).
    idempotent: bool = True
    #: ``parse`` reads the body's bytes as they came (a blob), not its JSON.
    raw: bool = False


def _seg(value: str) -> str:
    return quote(str(value), safe="")


def _query(**values: str | int | None) -> dict[str, str | int]:
    return {k: v for k, v in values.items() if v is not None}


def _page(path: str, item: Callable[[Any], ItemT],
          **query: str | int | None) -> Call[Page[ItemT]]:
    """One page of the list at ``path``, each item read by ``item``; ``query`` filters it
    (None: not given)."""
    return Call("GET", path, lambda b: Page.from_json(b, item), params=_query(**query))


class _Lister(Protocol[ItemT]):
    def __call__(self, *, limit: int | None, cursor: str | None) -> Call[Page[ItemT]]: ...


def _lister(path: str, item: Callable[[Any], ItemT]) -> _Lister[ItemT]:
    """The call that reads one page of a list with no filter (most of the API's lists)."""
    def list_page(*, limit: int | None, cursor: str | None) -> Call[Page[ItemT]]:
        return _page(path, item, limit=limit, cursor=cursor)
    return list_page


# -- runs --------------------------------------------------------------------------------


def create_run(agent_id: str, input: Any, *, version: int | None, webhook: str | None,
               priority: str | None, idempotency_key: str | None,
               stream: bool = False) -> Call[StartedRun]:
    key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
    body: dict[str, Any] = {"agent_id": agent_id, "input": input}
    if version is not None:
        body["version"] = version
    if webhook is not None:
        body["webhook"] = webhook
    if priority is not None:
        body["priority"] = priority
    if stream:
        body["stream"] = True
    # Idempotent because of the key: every attempt of this call sends the same one.
    return Call("POST", "/v1/runs", lambda b: StartedRun.from_json(b, key), body=body,
                headers={"Idempotency-Key": key})


def get_run(run_id: str) -> Call[Run]:
    return Call("GET", f"/v1/runs/{_seg(run_id)}", Run.from_json)


def run_trace(run_id: str) -> Call[dict[str, Any]]:
    return Call("GET", f"/v1/runs/{_seg(run_id)}/trace", dict)


def list_runs(*, status: str | None, limit: int | None, cursor: str | None) -> Call[Page[Run]]:
    return _page("/v1/runs", Run.from_json, status=status, limit=limit, cursor=cursor)


def run_children(run_id: str, *, limit: int | None,
                 cursor: str | None) -> Call[Page[Run]]:
    return _page(f"/v1/runs/{_seg(run_id)}/children", Run.from_json, limit=limit,
                 cursor=cursor)


def cancel_run(run_id: str) -> Call[Run]:
    # Asking twice changes nothing (the platform records one CancelRequested): repeatable.
    return Call("POST", f"/v1/runs/{_seg(run_id)}/cancel", Run.from_json)


def run_blobs(run_id: str) -> Call[list[RunBlob]]:
    return Call("GET", f"/v1/runs/{_seg(run_id)}/blobs",
                lambda b: [RunBlob.from_json(x) for x in b["data"]])


def read_run_blob(run_id: str, ref: str) -> Call[bytes]:
    return Call("GET", f"/v1/runs/{_seg(run_id)}/blobs/{_seg(ref)}", bytes, raw=True)


def events_path(run_id: str) -> str:
    return f"/v1/runs/{_seg(run_id)}/events"


def event_page(run_id: str, *, after: int, limit: int | None) -> Call[EventPage]:
    return Call("GET", events_path(run_id), EventPage.from_json,
                params=_query(after=after, limit=limit),
                headers={"Accept": "application/json"})


# -- agents ------------------------------------------------------------------------------


def _version_body(*, model: str, system_prompt: str, tools: Iterable[str],
                  needs_approval: Iterable[str], fallback_models: Iterable[str],
                  limits: Mapping[str, int] | None,
                  egress: Iterable[str] | None,
                  children: Iterable[Mapping[str, Any]] | None = None,
                  summarize: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "system_prompt": system_prompt,
                            "tools": list(tools), "needs_approval": list(needs_approval),
                            "fallback_models": list(fallback_models)}
    if limits is not None:
        body["limits"] = dict(limits)
    if egress is not None:
        body["sandbox"] = {"egress": list(egress)}
    if children is not None:
        body["children"] = [dict(child) for child in children]
    if summarize is not None:
        body["summarize"] = dict(summarize)
    return body


def create_agent(name: str, **version: Any) -> Call[Agent]:
    # Not repeatable: a second attempt would make a second agent.
    return Call("POST", "/v1/agents", Agent.from_json,
                body={"name": name, **_version_body(**version)}, idempotent=False)


def create_version(agent_id: str, *, number: int | None, **version: Any) -> Call[Agent]:
    body = _version_body(**version)
    if number is not None:
        body["version"] = number
    return Call("POST", f"/v1/agents/{_seg(agent_id)}/versions", Agent.from_json,
                body=body, idempotent=False)


def get_agent(agent_id: str) -> Call[Agent]:
    return Call("GET", f"/v1/agents/{_seg(agent_id)}", Agent.from_json)


def get_version(agent_id: str, version: int) -> Call[Agent]:
    return Call("GET", f"/v1/agents/{_seg(agent_id)}/versions/{int(version)}",
                Agent.from_json)


def promote(agent_id: str, version: int, evaluation_id: str | None) -> Call[Promotion]:
    body: dict[str, Any] = {"version": int(version)}
    if evaluation_id is not None:
        body["evaluation_id"] = evaluation_id
    # Idempotent: promoting the same version again changes nothing but the record.
    return Call("POST", f"/v1/agents/{_seg(agent_id)}/promote", Promotion.from_json,
                body=body, idempotent=True)


list_agents = _lister("/v1/agents", AgentSummary.from_json)


# -- test sets and evaluations (src/tenantry/api/evaluations.py) -----------------------


def create_test_set(agent_id: str, name: str, cases: Iterable[Mapping[str, Any]], *,
                    tool_results: str, stubs: Mapping[str, str] | None) -> Call[TestSet]:
    body: dict[str, Any] = {"name": name, "cases": [dict(case) for case in cases],
                            "tool_results": tool_results}
    if stubs:
        body["stubs"] = dict(stubs)
    # Not repeatable: a second attempt that finds the first's set answers 409 (its name).
    return Call("POST", f"/v1/agents/{_seg(agent_id)}/test-sets", TestSet.from_json,
                body=body, idempotent=False)


def get_test_set(agent_id: str, test_set_id: str) -> Call[TestSet]:
    return Call("GET", f"/v1/agents/{_seg(agent_id)}/test-sets/{_seg(test_set_id)}",
                TestSet.from_json)


def list_test_sets(agent_id: str, *, limit: int | None,
                   cursor: str | None) -> Call[Page[TestSetSummary]]:
    return _page(f"/v1/agents/{_seg(agent_id)}/test-sets", TestSetSummary.from_json,
                 limit=limit, cursor=cursor)


def start_evaluation(agent_id: str, test_set_id: str, *, candidate_version: int | None,
                     candidate_model: str | None,
                     baseline_version: int | None) -> Call[Evaluation]:
    candidate: dict[str, Any] = {}
    if candidate_version is not None:
        candidate["version"] = int(candidate_version)
    if candidate_model is not None:
        candidate["model"] = candidate_model
    body: dict[str, Any] = {"test_set_id": test_set_id, "candidate": candidate}
    if baseline_version is not None:
        body["baseline"] = {"version": int(baseline_version)}
    # Not repeatable: each attempt starts another evaluation (and its runs).
    return Call("POST", f"/v1/agents/{_seg(agent_id)}/evaluations", Evaluation.from_json,
                body=body, idempotent=False)


def get_evaluation(agent_id: str, evaluation_id: str) -> Call[Evaluation]:
    return Call("GET", f"/v1/agents/{_seg(agent_id)}/evaluations/{_seg(evaluation_id)}",
                Evaluation.from_json)


def list_evaluations(agent_id: str, *, limit: int | None,
                     cursor: str | None) -> Call[Page[EvaluationSummary]]:
    return _page(f"/v1/agents/{_seg(agent_id)}/evaluations", EvaluationSummary.from_json,
                 limit=limit, cursor=cursor)


# -- approvals ---------------------------------------------------------------------------


def list_approvals(*, status: str | None, limit: int | None,
                   cursor: str | None) -> Call[Page[Approval]]:
    return _page("/v1/approvals", Approval.from_json, status=status, limit=limit, cursor=cursor)


def get_approval(approval_id: str) -> Call[Approval]:
    return Call("GET", f"/v1/approvals/{_seg(approval_id)}", Approval.from_json)


def decide(approval_id: str, decision: str, comment: str | None) -> Call[Approval]:
    body: dict[str, Any] = {"decision": decision}
    if comment is not None:
        body["comment"] = comment
    # Not repeatable: deciding twice answers 409 even when the first attempt landed.
    return Call("POST", f"/v1/approvals/{_seg(approval_id)}", Approval.from_json, body=body,
                idempotent=False)


# -- the tenant's secrets and tool servers (/v1/secrets, /v1/tool-servers) ---------------


def _nothing(body: Any) -> None:
    return None


def put_secret(name: str, value: str) -> Call[Secret]:
    # Repeatable: a second attempt stores the same value again.
    return Call("PUT", f"/v1/secrets/{_seg(name)}", Secret.from_json, body={"value": value})


list_secrets = _lister("/v1/secrets", Secret.from_json)


def get_secret(name: str) -> Call[Secret]:
    return Call("GET", f"/v1/secrets/{_seg(name)}", Secret.from_json)


def delete_secret(name: str) -> Call[None]:
    # Not repeatable: a second attempt after the first landed answers 404.
    return Call("DELETE", f"/v1/secrets/{_seg(name)}", _nothing, idempotent=False)


def register_tool_server(name: str, url: str, *, honours_idempotency_keys: bool,
                         secret: str | None, oauth: Mapping[str, Any] | None,
                         call_timeout_seconds: int | None) -> Call[ToolServer]:
    body: dict[str, Any] = {"name": name, "url": url,
                            "honours_idempotency_keys": honours_idempotency_keys}
    if secret is not None:
        body["secret"] = secret
    if oauth is not None:
        body["oauth"] = dict(oauth)
    if call_timeout_seconds is not None:
        body["call_timeout_seconds"] = int(call_timeout_seconds)
    # Not repeatable: a second attempt after the first landed answers 409 (its name).
    return Call("POST", "/v1/tool-servers", ToolServer.from_json, body=body, idempotent=False)


list_tool_servers = _lister("/v1/tool-servers", ToolServer.from_json)


def get_tool_server(name: str) -> Call[ToolServer]:
    return Call("GET", f"/v1/tool-servers/{_seg(name)}", ToolServer.from_json)


def pin_tool_server(name: str) -> Call[ToolServer]:
    # Repeatable: accepting the server's current list twice pins it once.
    return Call("POST", f"/v1/tool-servers/{_seg(name)}/pin", ToolServer.from_json)


def connect_tool_server(name: str) -> Call[ToolServerConnection]:
    # Not repeatable: each attempt starts an authorization of its own (or, for client
    # credentials, asks for a token).
    return Call("POST", f"/v1/tool-servers/{_seg(name)}/connect",
                ToolServerConnection.from_json, idempotent=False)


def remove_tool_server(name: str) -> Call[None]:
    # Not repeatable: a second attempt after the first landed answers 404.
    return Call("DELETE", f"/v1/tool-servers/{_seg(name)}", _nothing, idempotent=False)


# -- the account: keys and the audit trail -------------------------------------------------


def create_api_key(*, name: str, scopes: Iterable[str] | None,
                   expires_at: str | None) -> Call[IssuedApiKey]:
    body: dict[str, Any] = {"name": name}
    if scopes is not None:
        body["scopes"] = list(scopes)
    if expires_at is not None:
        body["expires_at"] = expires_at
    # Not repeatable: a second attempt would make a second key.
    return Call("POST", "/v1/api-keys", IssuedApiKey.from_json, body=body, idempotent=False)


list_api_keys = _lister("/v1/api-keys", ApiKey.from_json)


def get_api_key(key_id: str) -> Call[ApiKey]:
    return Call("GET", f"/v1/api-keys/{_seg(key_id)}", ApiKey.from_json)


def rotate_api_key(key_id: str, *, overlap_seconds: int) -> Call[IssuedApiKey]:
    # Not repeatable: a second attempt would rotate the new key's predecessor again (404).
    return Call("POST", f"/v1/api-keys/{_seg(key_id)}/rotate", IssuedApiKey.from_json,
                body={"overlap_seconds": int(overlap_seconds)}, idempotent=False)


def revoke_api_key(key_id: str) -> Call[None]:
    # Repeatable: revoking a revoked key answers with its first revocation.
    return Call("DELETE", f"/v1/api-keys/{_seg(key_id)}", _nothing)


def read_audit(*, kind: str | None, run_id: str | None, actor: str | None,
               since: str | None, limit: int | None,
               cursor: str | None) -> Call[Page[AuditEntry]]:
    return _page("/v1/audit", AuditEntry.from_json, kind=kind, run_id=run_id, actor=actor,
                 since=since, limit=limit, cursor=cursor)


# -- the account: its people (/v1/users) -------------------------------------------------


def invite_user(email: str, role: str) -> Call[User]:
    # Not repeatable: a second attempt after the first landed answers 409 (the address).
    return Call("POST", "/v1/users", User.from_json, body={"email": email, "role": role},
                idempotent=False)


list_users = _lister("/v1/users", User.from_json)


def get_user(user_id: str) -> Call[User]:
    return Call("GET", f"/v1/users/{_seg(user_id)}", User.from_json)


def set_user_role(user_id: str, role: str) -> Call[User]:
    # Repeatable: setting the same role twice sets it once.
    return Call("PATCH", f"/v1/users/{_seg(user_id)}", User.from_json, body={"role": role})


def disable_user(user_id: str) -> Call[User]:
    # Repeatable: disabling a disabled user answers with it, as disabled.
    return Call("DELETE", f"/v1/users/{_seg(user_id)}", User.from_json)


def sign_in_link(user_id: str) -> Call[SignInLink]:
    # Not repeatable: each attempt makes another link (only the one returned is known).
    return Call("POST", f"/v1/users/{_seg(user_id)}/sign-in-links", SignInLink.from_json,
                idempotent=False)


# -- the account: exports (/v1/exports) ----------------------------------------------------


def request_export(idempotency_key: str | None) -> Call[Export]:
    key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
    # Idempotent because of the key, as a run start: every attempt sends the same one.
    return Call("POST", "/v1/exports", Export.from_json, headers={"Idempotency-Key": key})


list_exports = _lister("/v1/exports", Export.from_json)


def get_export(export_id: str) -> Call[Export]:
    return Call("GET", f"/v1/exports/{_seg(export_id)}", Export.from_json)


def export_archive_path(export_id: str) -> str:
    return f"/v1/exports/{_seg(export_id)}/archive"


def read_export_archive(export_id: str) -> Call[bytes]:
    return Call("GET", export_archive_path(export_id), bytes, raw=True)


# -- the account: webhooks (/v1/webhook-endpoints, -secret, -deliveries) --------------------


def create_webhook_endpoint(url: str, *, statuses: Iterable[str] | None,
                            agent_ids: Iterable[str] | None,
                            description: str | None) -> Call[WebhookEndpoint]:
    body: dict[str, Any] = {"url": url}
    if statuses is not None:
        body["statuses"] = list(statuses)
    if agent_ids is not None:
        body["agent_ids"] = list(agent_ids)
    if description is not None:
        body["description"] = description
    # Not repeatable: a second attempt would register a second endpoint.
    return Call("POST", "/v1/webhook-endpoints", WebhookEndpoint.from_json, body=body,
                idempotent=False)


list_webhook_endpoints = _lister("/v1/webhook-endpoints", WebhookEndpoint.from_json)


def get_webhook_endpoint(endpoint_id: str) -> Call[WebhookEndpoint]:
    return Call("GET", f"/v1/webhook-endpoints/{_seg(endpoint_id)}", WebhookEndpoint.from_json)


def delete_webhook_endpoint(endpoint_id: str) -> Call[None]:
    # Not repeatable: a second attempt after the first landed answers 404.
    return Call("DELETE", f"/v1/webhook-endpoints/{_seg(endpoint_id)}", _nothing,
                idempotent=False)


def rotate_webhook_secret(overlap_seconds: int | None) -> Call[RotatedWebhookSecret]:
    body = NO_BODY if overlap_seconds is None else {"overlap_seconds": int(overlap_seconds)}
    # Not repeatable: a second attempt would replace the new secret, unseen, at once.
    return Call("POST", "/v1/webhook-secret/rotate", RotatedWebhookSecret.from_json,
                body=body, idempotent=False)


def list_webhook_deliveries(*, run_id: str | None, endpoint_id: str | None,
                            limit: int | None,
                            cursor: str | None) -> Call[Page[WebhookDelivery]]:
    return _page("/v1/webhook-deliveries", WebhookDelivery.from_json, run_id=run_id,
                 endpoint_id=endpoint_id, limit=limit, cursor=cursor)


# -- the account: its own model provider accounts (/v1/model-accounts) --------------------


def register_model_account(*, provider: str, base_url: str, models: Iterable[str],
                           region: str, api_key: str, rpm: int | None, tpm: int | None,
                           priority: int | None) -> Call[ModelAccount]:
    body: dict[str, Any] = {"provider": provider, "base_url": base_url,
                            "models": list(models), "region": region, "api_key": api_key}
    for name, value in (("rpm", rpm), ("tpm", tpm), ("priority", priority)):
        if value is not None:
            body[name] = int(value)
    # Not repeatable: a second attempt would register a second account (and key).
    return Call("POST", "/v1/model-accounts", ModelAccount.from_json, body=body,
                idempotent=False)


list_model_accounts = _lister("/v1/model-accounts", ModelAccount.from_json)


def get_model_account(account_id: str) -> Call[ModelAccount]:
    return Call("GET", f"/v1/model-accounts/{_seg(account_id)}", ModelAccount.from_json)


def rotate_model_account_key(account_id: str, api_key: str) -> Call[ModelAccount]:
    # Repeatable: a second attempt stores the same key again.
    return Call("PUT", f"/v1/model-accounts/{_seg(account_id)}/api-key",
                ModelAccount.from_json, body={"api_key": api_key})


def disable_model_account(account_id: str) -> Call[ModelAccount]:
    # Not repeatable: a second attempt after the first landed answers 404.
    return Call("DELETE", f"/v1/model-accounts/{_seg(account_id)}", ModelAccount.from_json,
                idempotent=False)
