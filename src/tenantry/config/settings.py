"""Settings: read once from the environment (``TENANTRY_*``, each variable declared once in
:mod:`tenantry.config.variables`) or flags, passed down explicitly.

There is no module-level settings object: the CLI builds one and hands it to the app and
worker factories; tests build their own.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tenantry.config.reconciliation import admin_keys, check_reconciliation
from tenantry.config.variable import Variable, read
from tenantry.config.variables import VARIABLES, variable
from tenantry.errors import ConfigurationError

#: Runs one retention batch (one transaction) deletes at most: past it a batch holds its
#: row locks, and the event rows it deletes, for too long.
MAX_RETENTION_BATCH = 10_000

#: A cell's name and a region (docs/how-to/cells.md): also the directory's CHECK and the API's rule.
CELL_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
#: The region a cell serves when none is named: it hosts a tenant of any region (``tenantry
#: up`` is one local cell with no router); a tenant in it may use any model account.
ANY_REGION = "default"
#: S3's rules for a bucket's name (the common part of AWS's and self-hosted servers').
S3_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
S3_REGION_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def _check_endpoint(endpoint: str, *, path_style: bool) -> None:
    """TENANTRY_S3_ENDPOINT is ``http(s)://host[:port][/]``: a clear error otherwise, which
    never echoes a password written into the URL."""
    problem = "must be an http:// or https:// URL of the object store (scheme, host and an " \
              "optional port, e.g. http://seaweedfs:8333)"
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:
        raise ConfigurationError(f"TENANTRY_S3_ENDPOINT {problem}") from None
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(
            "TENANTRY_S3_ENDPOINT must not carry credentials: set TENANTRY_S3_ACCESS_KEY_ID "
            "and TENANTRY_S3_SECRET_ACCESS_KEY")
    if (parts.scheme not in ("http", "https") or not parts.hostname
            or parts.path not in ("", "/") or parts.query or parts.fragment or port == 0):
        raise ConfigurationError(f"TENANTRY_S3_ENDPOINT {problem}, got {endpoint!r}")
    if not path_style and _is_address(parts.hostname):
        raise ConfigurationError(
            "TENANTRY_S3_PATH_STYLE=false puts the bucket in the host name, which needs a "
            f"host name in TENANTRY_S3_ENDPOINT, not the address {parts.hostname}")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tenantry"


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str | None = None
    # The operator console's cross-tenant reads log in separately, as a role that may
    # become tenantry_console (ADR 0011); unset: the embedded cluster's console login, or
    # with an external database the same URL as the tenant API (start-up warns if that
    # login may become tenantry_console).
    console_database_url: str | None = None
    data_dir: Path = field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = 8080
    operator_token: str | None = None
    master_key: str | None = None
    # Where browsers and authorization servers reach the API (the OAuth callback's base).
    public_url: str | None = None
    # Sign-in to the tenant console by OpenID Connect (tenants/oidc.py); unset: links only.
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = field(default=None, repr=False)
    # Sandboxes (ADR 0005): the backend (None → probed: microvm, gvisor, bwrap; "none"
    # turns code execution off), the warm pool's size per worker process, the per-sandbox
    # guest memory, the per-execution time limit, how long a parked run's sandbox is
    # kept paused before it is hibernated (its files are saved at the park either way), and
    # the size of its /work in all (each file is capped at it too).
    sandbox_backend: str | None = None
    sandbox_image_dir: Path | None = None  # guest images and templates; data_dir/sandbox
    sandbox_pool_size: int = 2
    sandbox_memory_mib: int = 256
    # Guest RAM of a browser sandbox (the microVM's browser image: Chromium and its
    # 317 MB initramfs, unpacked in RAM).
    sandbox_browser_memory_mib: int = 1536
    sandbox_timeout_seconds: int = 60
    sandbox_hibernate_seconds: int = 300
    # The weakest boundary a production worker (`tenantry worker`) starts with: microvm >
    # gvisor > bwrap (a microvm without netns/cgroup ranks below gvisor; sandbox/probe.py).
    sandbox_min_boundary: str = "gvisor"
    # Paused sandboxes of parked runs one worker process keeps, in all and per tenant;
    # past either the oldest is hibernated (its files are saved at the park already).
    sandbox_kept_max: int = 32
    sandbox_kept_per_tenant: int = 8
    # Bytes each tenant may hold in the blob store (sandbox file saves, large tool
    # output); a write past it is refused (blobs/). 0: no quota.
    blob_quota_mib: int = 1024
    # Where blobs' bytes live (blobs/, ADR 0042): "directory" (data_dir/blobs, one host) or
    # "s3" (a bucket every host of the cell shares). s3_endpoint None: AWS in s3_region; no
    # keys: the AWS credential chain; s3_path_style None: path-style with an endpoint.
    blob_store: str = "directory"
    s3_endpoint: str | None = None
    s3_bucket: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = field(default=None, repr=False)
    s3_path_style: bool | None = None
    # Size of a sandbox's /work in all (bwrap/gVisor tmpfs, the microVM's disk), and the
    # per-file cap.
    sandbox_work_mib: int = 256
    # Role the application switches to on every connection: it has no BYPASSRLS, so
    # row-level security is the second wall behind every query's WHERE clause.
    db_role: str = "tenantry_app"
    db_pool_min: int = 2
    db_pool_max: int = 20
    max_body_bytes: int = 1024 * 1024
    log_format: str = "auto"  # auto | json | text
    # The run engine.
    # One model account from configuration (besides those registered through the operator
    # API): it serves any model, after every registered account. Unset → the built-in
    # scripted model serves the `scripted` models.
    model_base_url: str | None = None
    model_api_key: str | None = None
    model_provider: str = "openai"  # the wire format of model_base_url: openai | anthropic
    # Model accounts called without the provider's streaming mode (ADR 0030), by id
    # (`configured` is model_base_url's, `scripted` the built-in one); `*`: every account.
    model_no_stream: tuple[str, ...] = ()
    lease_seconds: float = 30.0
    # Refused egress attempts of one agent version's sandboxes (over all its runs) before
    # the version is flagged for review (agents/flags.py).
    egress_flag_threshold: int = 20
    # Child runs (runs/child_step.py): how deep a chain of runs starting runs may go (1: a
    # top-level run's children may start none), and how many children one run may start.
    child_max_depth: int = 3
    child_max_per_run: int = 20
    # Shedding (ADR 0008), by runs queued in the whole cell: from delay_new_runs_at the
    # claim serves in-flight runs of every tenant before new runs; from
    # refuse_batch_runs_at new batch runs get 503 overloaded; from max_queued_runs every
    # new run does. Unset levels derive from max_queued_runs (50%, 80%). Each API and
    # worker process reads the depth at most once per load_read_seconds.
    max_queued_runs: int = 100_000
    refuse_batch_runs_at: int | None = None
    delay_new_runs_at: int | None = None
    load_read_seconds: float = 1.0
    # The claim order: fair (the scheduler) or fifo (oldest run of any tenant; only for
    # measuring what fairness buys — it ignores every tenant policy).
    claim_order: str = "fair"
    worker_concurrency: int = 200
    # Worker processes `tenantry worker` runs on this host, each its own event loop under
    # one supervisor (bootstrap/supervisor.py); None: one per CPU this process may use;
    # 1: the command's own process alone, no supervisor.
    worker_processes: int | None = None
    # Attempts one `tenantry activity-worker` runs at once (one sandbox each).
    activity_worker_slots: int = 4
    workers: int = 1  # worker loops inside `tenantry up`
    # The browser in a run's sandbox (ADR 0033): one action's page-load time limit, pages
    # and bytes one run's browser may load, and whether bwrap (which shares the host's
    # kernel) may run it — off: the tools answer that the browser is not available there.
    browser_page_timeout_seconds: int = 30
    browser_max_pages: int = 50
    browser_max_mib: int = 50
    browser_dev_backends: bool = False
    # Webhooks to loopback/private addresses are refused unless this is set (dev, tests).
    webhook_allow_private: bool = False
    # Tool servers tenants register themselves (tools/destinations.py): the hosts allowed
    # (egress allow-list syntax; empty: any), and whether private addresses (and http) are.
    tenant_tool_server_hosts: tuple[str, ...] = ()
    tenant_tool_servers_allow_private: bool = False
    # The hosts model accounts tenants register themselves may be at (the same rules, its
    # own list: the providers allowed need not be the tool vendors; empty: any).
    tenant_model_account_hosts: tuple[str, ...] = ()
    # One webhook attempt's whole deadline (resolve, connect, send, read), and deliveries
    # in flight at once per worker process, in all and per tenant.
    webhook_deadline_seconds: int = 15
    webhook_concurrency: int = 32
    webhook_concurrency_per_tenant: int = 4
    # Retention (ADR 0017): each `tenantry worker` process runs one cleaner (off: none
    # in this process — another does it), deleting runs per batch in one transaction
    # (bounds how long a batch holds its row locks), each tenant's pass coming round this
    # often.
    retention: bool = True
    retention_batch: int = 500
    retention_every_seconds: int = 60
    # Observability: OpenTelemetry spans per step (None: off, console, otlp) and, for a
    # standalone `tenantry worker`, a port serving its own /metrics (None: off).
    otel_exporter: str | None = None
    worker_metrics_port: int | None = None
    # Open event streams (SSE) one API process serves, in all and per tenant: past either,
    # 429 overloaded. Each open stream costs a socket and a task, never a pool connection.
    sse_max_streams: int = 1000
    sse_max_streams_per_tenant: int = 100
    # The console cookie's Secure flag: auto sets it when the request came over https (as
    # uvicorn sees it); true forces it behind a TLS-terminating proxy uvicorn does not trust.
    console_secure_cookie: str = "auto"  # auto | true | false
    # Cells (ADR 0027): this stack's name and the region it serves. A cell in
    # region R creates only tenants of region R; one in `default` (a lone `tenantry up`)
    # creates any. The name is each tenant's `home_cell`.
    cell: str = "local"
    region: str = ANY_REGION
    # `tenantry router` (ADR 0028): the global directory's Postgres, and where it listens.
    directory_url: str | None = None
    router_host: str = "127.0.0.1"
    router_port: int = 8070
    # What one tenant may hold of the router's connections to its cell (ADR 0028, "Caps and
    # deadlines"), per router process. The router opens at most router_cell_connections to
    # each cell; a tenant holds at most router_max_requests_per_tenant of them (unset: a
    # tenth), of which at most router_max_streams_per_tenant event streams (unset: half of
    # those, so a tenant at its stream cap still has room for its ordinary calls); operator
    # calls at most router_max_operator_requests per cell (unset: a twentieth). Past a
    # cap: 429 overloaded at once. The resolved values: router_caps.
    router_cell_connections: int = 1000
    router_max_requests_per_tenant: int | None = None
    router_max_streams_per_tenant: int | None = None
    router_max_operator_requests: int | None = None
    # Deadlines on a forwarded answer's body: no byte from the cell, or no byte taken by
    # the client, for router_idle_seconds ends it (above twice the cell's 15 s SSE
    # keepalive); a body other than an event stream must end within router_body_seconds
    # of its head; an event stream is ended cleanly, between two events, after
    # router_stream_lifetime_seconds (clients resume with Last-Event-ID).
    router_idle_seconds: float = 35.0
    router_body_seconds: float = 120.0
    router_stream_lifetime_seconds: float = 900.0
    # Scheduled billing reconciliation (billing/schedule.py): the admin keys of the operator
    # accounts it reconciles (`account=key` each), and the operator's webhook it tells of
    # flagged and late days, signed with the secret when there is one.
    reconcile_admin_keys: tuple[str, ...] = field(default=(), repr=False)
    operator_webhook_url: str | None = None
    operator_webhook_secret: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        values = read(VARIABLES, os.environ if env is None else env)
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.sandbox_backend not in (None, "microvm", "gvisor", "bwrap", "none"):
            raise ConfigurationError(
                f"TENANTRY_SANDBOX_BACKEND must be microvm, gvisor, bwrap or none, "
                f"got {self.sandbox_backend!r}"
            )
        if self.sandbox_min_boundary not in ("microvm", "gvisor", "bwrap"):
            raise ConfigurationError(
                "TENANTRY_SANDBOX_MIN_BOUNDARY must be microvm, gvisor or bwrap, "
                f"got {self.sandbox_min_boundary!r}")
        if self.claim_order not in ("fair", "fifo"):
            raise ConfigurationError(
                f"TENANTRY_CLAIM_ORDER must be fair or fifo, got {self.claim_order!r}")
        if self.model_provider not in ("openai", "anthropic"):
            raise ConfigurationError("TENANTRY_MODEL_PROVIDER must be openai or anthropic, "
                                     f"got {self.model_provider!r}")
        if self.otel_exporter not in (None, "none", "console", "otlp"):
            raise ConfigurationError("TENANTRY_OTEL_EXPORTER must be console, otlp or none, "
                                     f"got {self.otel_exporter!r}")
        if self.worker_metrics_port is not None and not 0 < self.worker_metrics_port <= 65535:
            raise ConfigurationError("TENANTRY_WORKER_METRICS_PORT must be 1..65535")
        if self.log_format not in ("auto", "json", "text"):
            raise ConfigurationError("TENANTRY_LOG_FORMAT must be auto, json or text")
        if self.console_secure_cookie not in ("auto", "true", "false"):
            raise ConfigurationError("TENANTRY_CONSOLE_SECURE_COOKIE must be auto, true or "
                                     f"false, got {self.console_secure_cookie!r}")
        # Values that may come from a flag as well as from the variable (or from a test's
        # own Settings): each at its variable's minimum, named with its flag.
        for name, value in (
            ("TENANTRY_WORKER_CONCURRENCY", self.worker_concurrency),
            ("TENANTRY_ACTIVITY_WORKER_SLOTS", self.activity_worker_slots),
            ("TENANTRY_WORKERS", self.workers),
            ("TENANTRY_WORKER_PROCESSES", self.processes),
            ("TENANTRY_LEASE_SECONDS", self.lease_seconds),
            ("TENANTRY_EGRESS_FLAG_THRESHOLD", self.egress_flag_threshold),
            ("TENANTRY_CHILD_MAX_DEPTH", self.child_max_depth),
            ("TENANTRY_CHILD_MAX_PER_RUN", self.child_max_per_run),
            ("TENANTRY_RETENTION_EVERY_SECONDS", self.retention_every_seconds),
            ("TENANTRY_PORT", self.port),
            ("TENANTRY_SANDBOX_BROWSER_MEMORY_MIB", self.sandbox_browser_memory_mib),
            ("TENANTRY_SSE_MAX_STREAMS", self.sse_max_streams),
            ("TENANTRY_SSE_MAX_STREAMS_PER_TENANT", self.sse_max_streams_per_tenant),
        ):
            declared = variable(name)
            minimum = declared.minimum or 0
            if value < minimum:
                raise ConfigurationError(
                    f"{declared.label} must be at least {minimum}, got {value}")
        if not 1 <= self.webhook_concurrency_per_tenant <= self.webhook_concurrency:
            raise ConfigurationError(
                "TENANTRY_WEBHOOK_CONCURRENCY_PER_TENANT must be 1..TENANTRY_WEBHOOK_CONCURRENCY"
                f" ({self.webhook_concurrency}), got {self.webhook_concurrency_per_tenant}")
        if not 1 <= self.retention_batch <= MAX_RETENTION_BATCH:
            raise ConfigurationError(f"TENANTRY_RETENTION_BATCH must be 1..{MAX_RETENTION_BATCH}"
                                     f", got {self.retention_batch}")
        if self.webhook_deadline_seconds < 1:
            raise ConfigurationError("TENANTRY_WEBHOOK_DEADLINE_SECONDS must be at least 1")
        if self.port > 65535:
            raise ConfigurationError(f"{variable('TENANTRY_PORT').label} must be at most 65535")
        if not 0 <= self.router_port <= 65535:
            raise ConfigurationError(f"{variable('TENANTRY_ROUTER_PORT').label} must be "
                                     f"0..65535, got {self.router_port}")
        self._validate_router()
        self._validate_blob_store()
        self._validate_oidc()
        check_reconciliation(self.operator_webhook_url, self.reconcile_admin_keys)
        for setting, ident in (("TENANTRY_CELL", self.cell), ("TENANTRY_REGION", self.region)):
            if not isinstance(ident, str) or not CELL_NAME_RE.fullmatch(ident):
                raise ConfigurationError(
                    f"{setting} must be 1-64 characters of a-z, 0-9, '_', '-' starting with "
                    f"a letter or digit, got {ident!r}")
        self._validate_shedding()
        if self.db_pool_min > self.db_pool_max:
            raise ConfigurationError("TENANTRY_DB_POOL_MIN must not exceed TENANTRY_DB_POOL_MAX")

    @property
    def admin_keys(self) -> dict[str, str]:
        """TENANTRY_RECONCILE_ADMIN_KEYS by account id."""
        return admin_keys(self.reconcile_admin_keys)

    def _validate_oidc(self) -> None:
        if self.oidc_issuer is None:
            if self.oidc_client_id is not None or self.oidc_client_secret is not None:
                raise ConfigurationError("TENANTRY_OIDC_CLIENT_ID and _SECRET need "
                                         "TENANTRY_OIDC_ISSUER (the provider)")
            return
        if not self.oidc_client_id:
            raise ConfigurationError("TENANTRY_OIDC_ISSUER needs TENANTRY_OIDC_CLIENT_ID (the "
                                     "client id the provider issued to this platform)")
        problem = ("TENANTRY_OIDC_ISSUER must be the provider's https:// issuer URL (http:// "
                   f"only on a loopback address), with no query or fragment, got "
                   f"{self.oidc_issuer[:200]!r}")
        try:
            parts = urlsplit(self.oidc_issuer)
            parts.port  # noqa: B018 - raises on a port out of range
        except ValueError:
            raise ConfigurationError(problem) from None
        loopback = parts.hostname in ("localhost", "127.0.0.1", "::1")
        if (not parts.hostname or parts.query or parts.fragment or parts.username is not None
                or not (parts.scheme == "https" or (parts.scheme == "http" and loopback))):
            raise ConfigurationError(problem)

    def _validate_blob_store(self) -> None:
        if self.blob_store not in ("directory", "s3"):
            raise ConfigurationError(
                f"TENANTRY_BLOB_STORE must be directory or s3, got {self.blob_store!r}")
        if self.blob_store != "s3":
            return
        if not self.s3_bucket:
            raise ConfigurationError(
                "TENANTRY_BLOB_STORE=s3 needs TENANTRY_S3_BUCKET (the bucket's name)")
        if not S3_BUCKET_RE.fullmatch(self.s3_bucket):
            raise ConfigurationError(
                "TENANTRY_S3_BUCKET must be 3-63 characters of a-z, 0-9, '.', '-', starting "
                f"and ending with a letter or digit, got {self.s3_bucket!r}")
        if not S3_REGION_RE.fullmatch(self.s3_region):
            raise ConfigurationError("TENANTRY_S3_REGION must be a region name such as "
                                     f"us-east-1, got {self.s3_region!r}")
        if (self.s3_access_key_id is None) != (self.s3_secret_access_key is None):
            raise ConfigurationError(
                "set both TENANTRY_S3_ACCESS_KEY_ID and TENANTRY_S3_SECRET_ACCESS_KEY, or "
                "neither (then the AWS credential chain applies)")
        if self.s3_endpoint is not None:
            _check_endpoint(self.s3_endpoint, path_style=self.s3_uses_path_style)
        elif self.s3_path_style:
            raise ConfigurationError(
                "TENANTRY_S3_PATH_STYLE=true needs TENANTRY_S3_ENDPOINT (AWS S3 is reached "
                "virtual-hosted)")

    @property
    def s3_uses_path_style(self) -> bool:
        """The bucket in the path (TENANTRY_S3_PATH_STYLE; unset: with an endpoint)."""
        if self.s3_path_style is None:
            return self.s3_endpoint is not None
        return self.s3_path_style

    @property
    def router_caps(self) -> tuple[int, int, int]:
        """(requests per tenant, event streams per tenant, operator calls per cell) the
        router allows in flight: as set, else derived from router_cell_connections."""
        connections = self.router_cell_connections
        requests = self.router_max_requests_per_tenant or max(2, connections // 10)
        streams = self.router_max_streams_per_tenant or max(1, requests // 2)
        operator = self.router_max_operator_requests or max(1, connections // 20)
        return requests, streams, operator

    def _validate_router(self) -> None:
        connections = self.router_cell_connections
        if connections < 2:
            raise ConfigurationError("TENANTRY_ROUTER_CELL_CONNECTIONS must be at least 2, "
                                     f"got {connections}")
        requests, streams, operator = self.router_caps
        # Streams count as requests too; fewer streams than requests leaves a tenant at its
        # stream cap room for its ordinary calls.
        if not 1 <= streams < requests <= connections:
            raise ConfigurationError(
                "the router's caps must satisfy 1 <= TENANTRY_ROUTER_MAX_STREAMS_PER_TENANT "
                f"({streams}) < TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT ({requests}) <= "
                f"TENANTRY_ROUTER_CELL_CONNECTIONS ({connections})")
        if not 1 <= operator <= connections:
            raise ConfigurationError(
                "TENANTRY_ROUTER_MAX_OPERATOR_REQUESTS must be 1..TENANTRY_ROUTER_CELL_"
                f"CONNECTIONS ({connections}), got {operator}")
        for name, value in (("TENANTRY_ROUTER_IDLE_SECONDS", self.router_idle_seconds),
                            ("TENANTRY_ROUTER_BODY_SECONDS", self.router_body_seconds),
                            ("TENANTRY_ROUTER_STREAM_LIFETIME_SECONDS",
                             self.router_stream_lifetime_seconds)):
            if not value > 0:
                raise ConfigurationError(f"{name} must be above 0, got {value}")

    def _validate_shedding(self) -> None:
        levels = [(variable("TENANTRY_DELAY_NEW_RUNS_AT").label, self.delay_new_runs_at),
                  (variable("TENANTRY_REFUSE_BATCH_RUNS_AT").label,
                   self.refuse_batch_runs_at),
                  (variable("TENANTRY_MAX_QUEUED_RUNS").label, self.max_queued_runs)]
        given: list[tuple[str, int]] = [(n, v) for n, v in levels if v is not None]
        for name, value in given:
            if value < 1:
                raise ConfigurationError(f"{name} must be at least 1, got {value}")
        for (low_name, low), (high_name, high) in itertools.pairwise(given):
            if low > high:
                raise ConfigurationError(
                    f"{low_name} ({low}) must not exceed {high_name} ({high}): the levels "
                    "of shedding come in this order")
        if self.load_read_seconds < 0:
            raise ConfigurationError("TENANTRY_LOAD_READ_SECONDS must be at least 0")

    @property
    def processes(self) -> int:
        """Worker processes ``tenantry worker`` runs (TENANTRY_WORKER_PROCESSES, else one
        per CPU this process may be scheduled on)."""
        if self.worker_processes is not None:
            return self.worker_processes
        try:
            return len(os.sched_getaffinity(0)) or 1
        except AttributeError:  # not Linux
            return os.cpu_count() or 1

    @property
    def sandbox_dir(self) -> Path:
        return self.sandbox_image_dir or self.data_dir / "sandbox"

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def default_text(declared: Variable) -> str:
    """The value ``declared`` takes when unset, as the configuration reference writes it
    (Markdown): its own wording if it has one, else its setting's default."""
    if declared.default is not None:
        return declared.default
    found = next((f for f in fields(Settings) if f.name == declared.field), None)
    value = None if found is None else found.default
    if value is None or value is MISSING:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"
