"""The bodies of the tool-server routes (``api/tool_servers.py`` for the operator,
``api/own_tool_servers.py`` for the tenant): what registering one takes, and what a server
and its OAuth connection are answered as — never a token, never a secret's value."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from tenantry.api.fields import Body, HttpUrl, Label, SecretName, Text
from tenantry.tools import servers


class OAuthIn(Body):
    """How the platform authorizes with a server that answers 401 with a Bearer challenge
    (the MCP authorization spec). Without it: the authorization code grant, with a client
    registered dynamically when connecting."""

    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: Text | None = Field(default=None, min_length=1, max_length=512,
                                   description="A client the authorization server issued "
                                               "beforehand (needed for client_credentials).")
    client_secret: SecretName | None = Field(
        default=None, description="Name of the vault secret holding that client's secret.")


class RegisterToolServer(Body):
    name: Label
    url: HttpUrl = Field(description="The MCP server's streamable-HTTP endpoint.")
    honours_idempotency_keys: bool = Field(
        description="Whether the server performs a call once per Idempotency-Key. Calls to "
                    "servers that do not are never retried after an ambiguous crash.")
    secret: SecretName | None = Field(
        default=None,
        description="Name of a vault secret (PUT .../secrets/{name}) sent as "
                    "`Authorization: Bearer <value>` on each call to this server only.")
    oauth: OAuthIn | None = None
    call_timeout_seconds: int = Field(
        default=servers.DEFAULT_CALL_TIMEOUT_SECONDS, ge=1, le=servers.MAX_CALL_TIMEOUT_SECONDS,
        description="How long one call to this server may take, retries included, before the "
                    "model is told it timed out. Raise it for tools that take minutes.")


class OAuthOut(BaseModel):
    """An OAuth server's connection: never a token."""

    status: Literal["authorization_required", "connected"]
    reason: str | None
    grant: str
    scope: str | None
    issuer: str
    expires_at: datetime | None = Field(description="When the access token expires.")
    connected_at: datetime | None


class ToolServerOut(BaseModel):
    server_id: str
    name: str
    url: str
    honours_idempotency_keys: bool
    secret: str | None
    tools: list[str]
    tools_sha256: str
    call_timeout_seconds: int
    registered_by: servers.RegisteredBy = Field(
        description="`tenant`: the tenant registered it (`/v1`), and every connection to it "
                    "goes to an address the operator's rules allow; `operator`: the operator "
                    "did (`/admin/v1`).")
    created_at: datetime
    oauth: OAuthOut | None = Field(
        default=None, description="Set for a server that authorizes with OAuth: until it is "
                                  "connected (POST …/connect) it has no tools.")


class ToolServerList(BaseModel):
    data: list[ToolServerOut]
    next_cursor: str | None


class ConnectOut(BaseModel):
    authorization_url: str | None = Field(
        description="Where to send the browser of whoever authorizes the platform; null "
                    "when it is connected already (the client credentials grant).")
    server: ToolServerOut
