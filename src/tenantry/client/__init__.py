"""The Python client of a Tenantry platform's tenant API, blocking and asyncio.

    from tenantry.client import Client

    with Client("http://127.0.0.1:8080", api_key="tnt_...") as client:
        started = client.runs.create(agent_id, {"question": "..."})
        for event in client.runs.events(started.run_id):
            print(event)
        run = client.runs.wait(started.run_id)

The tenant's own tool servers and the vault secrets they send are ``client.tool_servers``
and ``client.secrets``; its API keys and audit trail, ``client.api_keys`` and
``client.audit``; its people, ``client.users``; exports of its data, ``client.exports``;
its webhooks, ``client.webhook_endpoints``, ``client.webhook_secret`` and
``client.webhook_deliveries``; its own model provider accounts, ``client.model_accounts``.
Run starts (and exports) carry an idempotency key (a random one unless given) and are
retried with it; event streams resume after a dropped connection with no gap and no repeat;
error answers are typed exceptions. It needs only the standard library, httpx2 and orjson:
nothing of the server is imported (docs/how-to/client-sdk.md).
"""

from __future__ import annotations

from tenantry.client._retry import Retrying
from tenantry.client.account import ApiKey, AuditEntry, IssuedApiKey, SignInLink, User
from tenantry.client.aio import AsyncClient
from tenantry.client.errors import (
    AdmissionsPaused,
    ApiError,
    BudgetExhausted,
    CellUnavailable,
    ClientError,
    ConfigError,
    Conflict,
    ConnectionFailed,
    DatabaseUnavailable,
    Forbidden,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    QuotaExceeded,
    ServerError,
    TenantErased,
    TenantMoving,
    ToolServerUrlRefused,
    Unauthorized,
    Unavailable,
    ValidationError,
    WaitTimeout,
)
from tenantry.client.evaluations import (
    Evaluation,
    EvaluationCase,
    EvaluationCheck,
    EvaluationSide,
    EvaluationSpec,
    EvaluationSummary,
    EvaluationToolCall,
    EvaluationTotals,
    TestCase,
    TestSet,
    TestSetSummary,
)
from tenantry.client.events import AsyncEventStream, EventStream, SseDecoder, SseMessage
from tenantry.client.exports import Export
from tenantry.client.model_accounts import ModelAccount
from tenantry.client.models import (
    TERMINAL_EVENTS,
    TERMINAL_STATUSES,
    Agent,
    AgentLimits,
    AgentSummary,
    Approval,
    ChildAgent,
    Event,
    EventPage,
    ModelDelta,
    Page,
    Promotion,
    ReviewFlag,
    Run,
    RunBlob,
    StartedRun,
    Usage,
)
from tenantry.client.sync import Client
from tenantry.client.tool_servers import (
    Secret,
    ToolServer,
    ToolServerConnection,
    ToolServerOAuth,
)
from tenantry.client.webhooks import RotatedWebhookSecret, WebhookDelivery, WebhookEndpoint

__all__ = [
    "TERMINAL_EVENTS",
    "TERMINAL_STATUSES",
    "AdmissionsPaused",
    "Agent",
    "AgentLimits",
    "AgentSummary",
    "ApiError",
    "ApiKey",
    "Approval",
    "AsyncClient",
    "AsyncEventStream",
    "AuditEntry",
    "BudgetExhausted",
    "CellUnavailable",
    "ChildAgent",
    "Client",
    "ClientError",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "DatabaseUnavailable",
    "Evaluation",
    "EvaluationCase",
    "EvaluationCheck",
    "EvaluationSide",
    "EvaluationSpec",
    "EvaluationSummary",
    "EvaluationToolCall",
    "EvaluationTotals",
    "Event",
    "EventPage",
    "EventStream",
    "Export",
    "Forbidden",
    "IssuedApiKey",
    "ModelAccount",
    "ModelDelta",
    "NotFound",
    "Overloaded",
    "Page",
    "PayloadTooLarge",
    "Promotion",
    "QuotaExceeded",
    "Retrying",
    "ReviewFlag",
    "RotatedWebhookSecret",
    "Run",
    "RunBlob",
    "Secret",
    "ServerError",
    "SignInLink",
    "SseDecoder",
    "SseMessage",
    "StartedRun",
    "TenantErased",
    "TenantMoving",
    "TestCase",
    "TestSet",
    "TestSetSummary",
    "ToolServer",
    "ToolServerConnection",
    "ToolServerOAuth",
    "ToolServerUrlRefused",
    "Unauthorized",
    "Unavailable",
    "Usage",
    "User",
    "ValidationError",
    "WaitTimeout",
    "WebhookDelivery",
    "WebhookEndpoint",
]
