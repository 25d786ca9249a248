"""The asyncio client's calls about the tenant's own account: ``AsyncClient(...).api_keys``,
``.audit``, ``.users``, ``.exports``, ``.webhook_endpoints``, ``.webhook_secret``,
``.webhook_deliveries``, ``.model_accounts`` (the work itself — runs, agents, approvals,
evaluations, tool servers — is ``aio.py``'s), as ``sync_account.py``'s, awaited."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Literal

import httpx2

from tenantry.client import _calls
from tenantry.client._transport import AsyncResource
from tenantry.client._wait import ExportWaiting, poll_async
from tenantry.client.account import ApiKey, AuditEntry, IssuedApiKey, SignInLink, User
from tenantry.client.errors import ConnectionFailed
from tenantry.client.exports import Export
from tenantry.client.model_accounts import ModelAccount
from tenantry.client.models import Page
from tenantry.client.webhooks import RotatedWebhookSecret, WebhookDelivery, WebhookEndpoint

__all__ = ["ApiKeys", "Audit", "Exports", "ModelAccounts", "Users", "WebhookDeliveries",
           "WebhookEndpoints", "WebhookSecret"]

Role = Literal["viewer", "approver", "developer", "admin"]
RunEnd = Literal["finished", "failed", "cancelled"]


class ApiKeys(AsyncResource):
    """The tenant's API keys (needs a key with ``keys:manage``): each with its scopes and
    an optional expiry; never wider than the key that makes it."""

    async def create(self, *, name: str = "", scopes: Iterable[str] | None = None,
               expires_at: datetime | None = None) -> IssuedApiKey:
        """A new key (``api_key`` shown this once): ``scopes`` (every scope of the calling
        key when None), ``expires_at`` an aware ``datetime``. Not retried once sent."""
        return await self._t.call(_calls.create_api_key(
            name=name, scopes=scopes,
            expires_at=expires_at.isoformat() if expires_at is not None else None))

    async def list(self, *, limit: int | None = None,
             cursor: str | None = None) -> Page[ApiKey]:
        """One page of the tenant's keys, revoked and expired ones too, newest first."""
        return await self._t.call(_calls.list_api_keys(limit=limit, cursor=cursor))

    async def get(self, key_id: str) -> ApiKey:
        return await self._t.call(_calls.get_api_key(key_id))

    async def rotate(self, key_id: str, *, overlap_seconds: int = 0) -> IssuedApiKey:
        """A new key in place of ``key_id`` (same name, scopes, expiry); the old one works
        ``overlap_seconds`` more (at most 7 days). Not retried once sent."""
        return await self._t.call(_calls.rotate_api_key(key_id, overlap_seconds=overlap_seconds))

    async def revoke(self, key_id: str) -> None:
        await self._t.call(_calls.revoke_api_key(key_id))


class Audit(AsyncResource):
    """The tenant's audit trail (needs ``audit:read``): tool calls and account changes,
    newest first."""

    async def list(self, *, kind: str | None = None, run_id: str | None = None,
             actor: str | None = None, since: datetime | None = None,
             limit: int | None = None, cursor: str | None = None) -> Page[AuditEntry]:
        """One page of the trail: ``kind`` ``tool_call`` or ``change``, one run's tool
        calls, one actor's changes (``key:<id>``, ``operator``), nothing before ``since``."""
        return await self._t.call(_calls.read_audit(
            kind=kind, run_id=run_id, actor=actor,
            since=since.isoformat() if since is not None else None, limit=limit,
            cursor=cursor))


class Users(AsyncResource):
    """The tenant's people (needs ``keys:manage``): each with a role, signing in to the
    tenant console with one-time links (docs/how-to/tenant-account.md)."""

    async def invite(self, email: str, *, role: Role) -> User:
        """A new user with ``role``: ``viewer``, ``approver``, ``developer`` or ``admin``.
        An address already one of the tenant's users: Conflict. Not retried once sent."""
        return await self._t.call(_calls.invite_user(email, role))

    async def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[User]:
        """One page of the tenant's users, disabled ones too, newest first."""
        return await self._t.call(_calls.list_users(limit=limit, cursor=cursor))

    async def get(self, user_id: str) -> User:
        return await self._t.call(_calls.get_user(user_id))

    async def set_role(self, user_id: str, role: Role) -> User:
        """A new role, in force from the user's next page (NotFound for a disabled user)."""
        return await self._t.call(_calls.set_user_role(user_id, role))

    async def disable(self, user_id: str) -> User:
        """Disable the user: their sessions end and their unused links stop working at
        once; they stay listed."""
        return await self._t.call(_calls.disable_user(user_id))

    async def sign_in_link(self, user_id: str) -> SignInLink:
        """A link that signs the user in to the tenant console once, within 15 minutes:
        send it to them yourself; ``url`` is shown this once. A disabled user: Conflict.
        Not retried once sent."""
        return await self._t.call(_calls.sign_in_link(user_id))


class Exports(AsyncResource):
    """Exports of everything the tenant has, one archive each (needs ``data:export``;
    the format: docs/reference/export-format.md). A worker writes it; it is kept 7 days."""

    async def create(self, *, idempotency_key: str | None = None) -> Export:
        """Ask for an export (``queued``). Sent with ``idempotency_key`` — a new random
        one when None — and the same key on every retry: one export however often it is
        sent; asking again with a key already used returns that export. Too many
        unfinished at once: QuotaExceeded."""
        return await self._t.call(_calls.request_export(idempotency_key))

    async def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[Export]:
        """One page of the tenant's exports, newest first (until they expire)."""
        return await self._t.call(_calls.list_exports(limit=limit, cursor=cursor))

    async def get(self, export_id: str) -> Export:
        return await self._t.call(_calls.get_export(export_id))

    async def wait(self, export_id: str, *,
                   timeout: float | None = None,  # noqa: ASYNC109 (the sync client's words)
                   poll_interval: float = 1.0) -> Export:
        """The export once it is ready or has failed (``ended``); :class:`WaitTimeout`
        after ``timeout`` seconds (its ``run`` is the export as last read). Reads it, at
        first often, then every ``poll_interval`` seconds."""
        return await poll_async(lambda: self.get(export_id),
                                ExportWaiting(export_id, timeout, poll_interval))

    async def archive(self, export_id: str) -> bytes:
        """The archive's bytes, in memory (``download`` writes a large one to a file).
        NotFound until the export is ready, and after it expired."""
        return await self._t.call(_calls.read_export_archive(export_id))

    async def download(self, export_id: str, path: str | os.PathLike[str]) -> Path:
        """Write the archive to ``path`` as it arrives and return it. It is written beside
        it first (``<path>.part``) and renamed once whole: ``path`` is never half an
        archive. NotFound until the export is ready; a connection lost after the answer
        began is ConnectionFailed (call again: the archive does not change)."""
        target = Path(path)
        part = target.with_name(target.name + ".part")
        try:
            async with self._t.stream(_calls.export_archive_path(export_id), {}) as response:
                # The standard library has no asynchronous file: each write in a thread.
                out = await asyncio.to_thread(part.open, "wb")
                try:
                    async for piece in response.aiter_bytes():
                        await asyncio.to_thread(out.write, piece)
                finally:
                    await asyncio.to_thread(out.close)
        except httpx2.TransportError as exc:
            part.unlink(missing_ok=True)
            raise ConnectionFailed(f"reading the archive of {export_id}: "
                                   f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        os.replace(part, target)
        return target


class WebhookEndpoints(AsyncResource):
    """URLs that hear the end of the tenant's runs, signed and retried as a run's own
    ``webhook`` is (needs ``integrations:manage``; at most 10)."""

    async def create(self, url: str, *, statuses: Iterable[RunEnd] | None = None,
               agent_ids: Iterable[str] | None = None,
               description: str | None = None) -> WebhookEndpoint:
        """Register ``url`` for every run's end, or only those ending with one of
        ``statuses`` and of one of ``agent_ids``. A URL whose host is not public:
        :class:`ApiError` 422 ``webhook_url_refused``. Not retried once sent."""
        return await self._t.call(_calls.create_webhook_endpoint(
            url, statuses=statuses, agent_ids=agent_ids, description=description))

    async def list(self, *, limit: int | None = None,
             cursor: str | None = None) -> Page[WebhookEndpoint]:
        """One page of the tenant's endpoints, oldest first."""
        return await self._t.call(_calls.list_webhook_endpoints(limit=limit, cursor=cursor))

    async def get(self, endpoint_id: str) -> WebhookEndpoint:
        return await self._t.call(_calls.get_webhook_endpoint(endpoint_id))

    async def delete(self, endpoint_id: str) -> None:
        """Remove the endpoint: deliveries to it not yet made are dropped; the attempts
        made stay in the history. Not retried once sent."""
        await self._t.call(_calls.delete_webhook_endpoint(endpoint_id))


class WebhookSecret(AsyncResource):
    """The secret that signs the tenant's webhook deliveries (needs
    ``integrations:manage``)."""

    async def rotate(self, *, overlap_seconds: int | None = None) -> RotatedWebhookSecret:
        """A new signing secret (shown this once); the current one signs beside it for
        ``overlap_seconds`` (0 to 7 days; the platform's default, 24 hours, when None).
        Not retried once sent."""
        return await self._t.call(_calls.rotate_webhook_secret(overlap_seconds))


class WebhookDeliveries(AsyncResource):
    """Every attempt to deliver a run's end, newest first (needs ``runs:read``)."""

    async def list(self, *, run_id: str | None = None, endpoint_id: str | None = None,
             limit: int | None = None,
             cursor: str | None = None) -> Page[WebhookDelivery]:
        """One page of attempts: one run's, or those to one endpoint."""
        return await self._t.call(_calls.list_webhook_deliveries(
            run_id=run_id, endpoint_id=endpoint_id, limit=limit, cursor=cursor))


class ModelAccounts(AsyncResource):
    """The tenant's own model provider accounts (bring your own key): registering, a new
    key and disabling need ``integrations:manage``, reading ``runs:read``
    (docs/how-to/own-model-keys.md)."""

    async def register(self, *, provider: Literal["openai", "anthropic"], base_url: str,
                 models: Iterable[str], region: str, api_key: str, rpm: int | None = None,
                 tpm: int | None = None, priority: int | None = None) -> ModelAccount:
        """Register an account that serves only the tenant's runs for ``models``, with the
        provider key ``api_key`` (write-only: kept in the tenant's vault, never returned).
        A ``base_url`` the operator's rules refuse: :class:`ApiError` 422
        ``model_account_url_refused``; a model with no price: Conflict. Not retried once
        sent."""
        return await self._t.call(_calls.register_model_account(
            provider=provider, base_url=base_url, models=models, region=region,
            api_key=api_key, rpm=rpm, tpm=tpm, priority=priority))

    async def list(self, *, limit: int | None = None,
             cursor: str | None = None) -> Page[ModelAccount]:
        """One page of the tenant's own accounts, disabled ones too, by id."""
        return await self._t.call(_calls.list_model_accounts(limit=limit, cursor=cursor))

    async def get(self, account_id: str) -> ModelAccount:
        """An enabled account of the tenant's (a disabled one: NotFound)."""
        return await self._t.call(_calls.get_model_account(account_id))

    async def rotate_key(self, account_id: str, api_key: str) -> ModelAccount:
        """Replace the account's provider key; workers use it within five minutes."""
        return await self._t.call(_calls.rotate_model_account_key(account_id, api_key))

    async def disable(self, account_id: str) -> ModelAccount:
        """Stop routing to the account (its runs move to another on their next step); its
        key is deleted from the vault. Not retried once sent."""
        return await self._t.call(_calls.disable_model_account(account_id))
