"""The variables of the processes and where they listen, the database, cells and the
router, backups and moves, and the API's limits."""

from __future__ import annotations

from tenantry.config.variable import Parse, Variable

PLATFORM = (
    Variable(
        "TENANTRY_DATABASE_URL",
        field="database_url",
        flag="--database-url",
        help="External Postgres; unset runs the embedded one in the data dir.",
        doc=(
            "External Postgres, as a `postgresql://user[:password]@host[:port]/database` URL or "
            "libpq `key=value` settings. A highly available cell lists every node "
            "(`@db1:5432,db2:5432/` or `host=db1,db2`): Tenantry then adds "
            "`target_session_attrs=read-write` unless the URL sets it, and follows the primary "
            "through a failover ([HA cell](../how-to/ha-cell.md)). Unset: the embedded Postgres "
            "in the data directory."),
    ),
    Variable(
        "TENANTRY_CONSOLE_DATABASE_URL",
        field="console_database_url",
        flag="--console-database-url",
        help=(
            "The operator's login (tenantry_console_login), for the console's cross-tenant reads "
            "and a tenant's erase (only it may shred the tenant's secrets); unset: the embedded "
            "one's, or --database-url."),
        doc=(
            "The operator console's login for its cross-tenant reads (`tenantry_console_login`, "
            "see [database roles](database-roles.md)); its own pool of at most 2 connections, "
            "opened on first use. Unset: with the embedded Postgres its console login, else "
            "`TENANTRY_DATABASE_URL`."),
    ),
    Variable(
        "TENANTRY_DATA_DIR",
        field="data_dir",
        parse=Parse.PATH,
        flag="--data-dir",
        help="Embedded Postgres, blob store, sandbox images.",
        default="`$XDG_DATA_HOME/tenantry`, else `~/.local/share/tenantry`",
        doc=(
            "Directory for the embedded Postgres (`postgres/`, `postgres.log`), the generated "
            "`operator_token`, the development `master_key` and the blob store (`blobs/`, tool "
            "outputs over 8 KiB)."),
    ),
    Variable(
        "TENANTRY_HOST",
        field="host",
        flag="--host",
        help="Address the API and the console listen on (0.0.0.0: every interface).",
        doc="Address the API listens on.",
    ),
    Variable(
        "TENANTRY_PORT",
        field="port",
        parse=Parse.INTEGER,
        minimum=0,
        flag="--port",
        help="Port the API and the console listen on.",
        doc="Port the API listens on (integer 0–65535).",
    ),
    Variable(
        "TENANTRY_PUBLIC_URL",
        field="public_url",
        doc=(
            "The URL people's browsers and authorization servers reach this platform's API at "
            "(behind a proxy: the proxy's), for the OAuth callback of tool servers "
            "(`<url>/oauth/callback`) and the tenant console's sign-in links "
            "(`<url>/app/sign-in?token=…`). Unset: the address the connect (or link) request "
            "came to. Read by the API."),
    ),
    Variable(
        "TENANTRY_OIDC_ISSUER",
        field="oidc_issuer",
        doc=(
            "An OpenID Connect provider tenants' people sign in to the tenant console with "
            "(`https://…`, its issuer exactly as its discovery document names it; `http://` only "
            "on a loopback address), beside one-time sign-in links. A person is their verified "
            "email address: the first sign-in binds the tenant's user of that address to the "
            "provider's subject. Register `<TENANTRY_PUBLIC_URL>/app/oidc/callback` as the "
            "client's redirect URI. Unset: links only. Read by the API."),
    ),
    Variable(
        "TENANTRY_OIDC_CLIENT_ID",
        field="oidc_client_id",
        doc="The client id the provider of `TENANTRY_OIDC_ISSUER` issued to this platform.",
    ),
    Variable(
        "TENANTRY_OIDC_CLIENT_SECRET",
        field="oidc_client_secret",
        doc=(
            "That client's secret (`client_secret_basic`, else `client_secret_post`, as the "
            "provider lists); unset: a public client (PKCE alone). Never logged or shown."),
    ),
    Variable(
        "TENANTRY_OPERATOR_TOKEN",
        field="operator_token",
        flag="--operator-token",
        help=(
            "The operator credential for /admin/v1; `up` and `api` generate and print one when "
            "unset."),
        doc=(
            "Bearer token for `/admin/v1`. Unset: read from `<data dir>/operator_token`, "
            "generated there (`op_…`, mode 0600) on first start. Recorded (as its SHA-256) "
            "in the database at start: `POST /admin/v1/operator-token/rotate` replaces it "
            "live, after which a process configured with the old one refuses it; a token the "
            "database has never seen becomes the only one in force. The workers' `/metrics` "
            "and the router compare with this configured value. The CLI's operator commands "
            "send it (`tenants`, `prices`, `approvals inbox`, `usage`, `billing reconcile`, "
            "and a tenant's command given `--tenant`); they do not read the data dir's "
            "file."),
    ),
    Variable(
        "TENANTRY_CELL",
        field="cell",
        flag="--cell",
        help="This cell's name: each tenant it creates has it as home_cell.",
        doc=(
            "This cell's name ([cells](../how-to/cells.md)): each tenant it creates gets it as "
            "`home_cell`, and it is the name the cell has in the global directory (`tenantry "
            "cells add NAME`). 1–64 characters of `a-z`, `0-9`, `_`, `-`, starting with a letter "
            "or digit; anything else stops start-up with one line."),
    ),
    Variable(
        "TENANTRY_REGION",
        field="region",
        flag="--region",
        help="The region this cell serves; `default` hosts tenants of any region.",
        doc=(
            "The region this cell serves, same rule as `TENANTRY_CELL`. Outside `default` the "
            "cell creates only tenants of this region (another is `422 region_not_served`) and a "
            "tenant created without one gets it. `default` hosts tenants of any region — "
            "`tenantry up`, one local cell with no router."),
    ),
    Variable(
        "TENANTRY_DIRECTORY_URL",
        field="directory_url",
        flag="--directory-url",
        help="The global directory's Postgres database (its schema brought current first).",
        default="unset (`router` refuses to start)",
        doc=(
            "The global directory's Postgres database (a `postgresql://` URL, several hosts "
            "allowed as for `TENANTRY_DATABASE_URL`): cells, tenants' home cells and states, API "
            "key hashes ([ADR 0027](../decisions/0027-global-directory.md)). `tenantry router` "
            "migrates it at start (its own migration series); `tenantry cells` commands too. "
            "Never a cell's database."),
    ),
    Variable(
        "TENANTRY_ROUTER_HOST",
        field="router_host",
        flag="--host",
        help="Address the router listens on.",
        doc="Address `tenantry router` listens on.",
    ),
    Variable(
        "TENANTRY_ROUTER_PORT",
        field="router_port",
        parse=Parse.INTEGER,
        minimum=0,
        flag="--port",
        help="Port the router listens on.",
        doc="Port `tenantry router` listens on (0–65535).",
    ),
    Variable(
        "TENANTRY_ROUTER_CELL_CONNECTIONS",
        field="router_cell_connections",
        parse=Parse.INTEGER,
        minimum=2,
        flag="--cell-connections",
        help=(
            "Connections the router opens to each cell at most (one per request in flight; more "
            "wait for one). The caps below default to shares of it."),
        doc=(
            "Connections `tenantry router` opens to each cell at most (integer ≥ 2), one per "
            "request in flight; more requests wait for one (up to the 60 s head timeout, then "
            "`503 cell_unavailable`). The caps below default to shares of it ([ADR "
            "0028](../decisions/0028-tenant-router.md#caps-and-deadlines))."),
    ),
    Variable(
        "TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT",
        field="router_max_requests_per_tenant",
        parse=Parse.INTEGER,
        minimum=2,
        flag="--max-requests-per-tenant",
        help=(
            "Requests of one tenant in flight through the router at once, event streams included;"
            " one more answers 429 overloaded."),
        default="a tenth of `TENANTRY_ROUTER_CELL_CONNECTIONS` (`100`)",
        doc=(
            "Requests of one tenant in flight through one router at once, event streams included "
            "(integer ≥ 2, at most `TENANTRY_ROUTER_CELL_CONNECTIONS`); one more answers `429 "
            "overloaded` at once, `Retry-After: 1`. Bounds the share of a cell's connections one "
            "tenant can hold, whatever it does."),
    ),
    Variable(
        "TENANTRY_ROUTER_MAX_STREAMS_PER_TENANT",
        field="router_max_streams_per_tenant",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--max-streams-per-tenant",
        help=(
            "Event streams of one tenant open through the router at once (fewer than "
            "--max-requests-per-tenant); one more answers 429 overloaded."),
        default="half of `TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT` (`50`)",
        doc=(
            "Event streams (`GET /v1/runs/{run_id}/events`, unless only JSON is accepted) of one "
            "tenant open through one router at once (integer ≥ 1, fewer than "
            "`TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT`, so a tenant at this cap can still make "
            "ordinary calls); one more answers `429 overloaded`, `Retry-After: 5`."),
    ),
    Variable(
        "TENANTRY_ROUTER_MAX_OPERATOR_REQUESTS",
        field="router_max_operator_requests",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--max-operator-requests",
        help="Operator calls in flight to each cell at once; one more answers 429.",
        default="a twentieth of `TENANTRY_ROUTER_CELL_CONNECTIONS` (`50`)",
        doc=(
            "Operator calls the router forwards to one cell at once (integer ≥ 1, at most "
            "`TENANTRY_ROUTER_CELL_CONNECTIONS`); one more answers `429 overloaded`, "
            "`Retry-After: 1`."),
    ),
    Variable(
        "TENANTRY_ROUTER_IDLE_SECONDS",
        field="router_idle_seconds",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--idle-seconds",
        help=(
            "A forwarded answer ends when the cell sends nothing, or the caller takes nothing, "
            "for this long (above the cells' 15 s stream keepalive)."),
        doc=(
            "A forwarded answer ends when the cell sends nothing for this long, or when the "
            "caller takes nothing for this long (then the router drops both connections). An "
            "event stream ended so ends between two events where it can (the client resumes with "
            "`Last-Event-ID`); any other answer is cut (its caller's connection dropped "
            "mid-body). Keep it above twice the cells' 15 s stream keepalive. Integer seconds ≥ "
            "1."),
    ),
    Variable(
        "TENANTRY_ROUTER_BODY_SECONDS",
        field="router_body_seconds",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--body-seconds",
        help="An answer other than an event stream is cut unless whole this long after its head.",
        doc=(
            "An answer other than an event stream must be whole this long after its head arrived,"
            " else it is cut (also bounds a caller that reads a byte now and then). Integer "
            "seconds ≥ 1."),
    ),
    Variable(
        "TENANTRY_ROUTER_STREAM_LIFETIME_SECONDS",
        field="router_stream_lifetime_seconds",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--stream-lifetime-seconds",
        help=(
            "An event stream is ended cleanly, between two events, after this long; clients "
            "resume it with Last-Event-ID."),
        doc=(
            "An event stream through the router is ended cleanly, between two events, after this "
            "long; the SDK reconnects at once with `Last-Event-ID` and loses nothing. Integer "
            "seconds ≥ 1."),
    ),
    Variable(
        "TENANTRY_CELL_DATABASE_URL",
        flag="--database-url",
        help=(
            "The cell's database on its owner login: what `cells move` copies from and to (not "
            "needed to route)."),
        doc=(
            "For `tenantry cells add`: the cell's database on its owner login, kept in the "
            "directory for `tenantry cells move` (which reads and writes every table of the "
            "moving tenant there)."),
    ),
    Variable(
        "TENANTRY_BACKUP_STANZA",
        flag="--stanza",
        help="The cell's pgBackRest stanza (its section in pgbackrest.conf).",
        default="unset (the commands refuse)",
        doc=(
            "The cell's pgBackRest stanza, its section in pgBackRest's configuration file "
            "([backups](../how-to/backup.md))."),
    ),
    Variable(
        "TENANTRY_BACKUP_CONFIG",
        flag="--config",
        help="pgBackRest's configuration file.",
        default="pgBackRest's own (`/etc/pgbackrest/pgbackrest.conf`)",
        doc="pgBackRest's configuration file.",
    ),
    Variable(
        "TENANTRY_MOVE_SOURCE_MASTER_KEY",
        doc=(
            "For `tenantry cells move` between cells whose `TENANTRY_MASTER_KEY`s differ: the "
            "source cell's key, with `TENANTRY_MOVE_TARGET_MASTER_KEY`, so the tenant's data key "
            "is re-wrapped under the target's ([ADR 0029](../decisions/0029-moving-a-tenant.md))."
            " Neither when the cells share one key."),
    ),
    Variable(
        "TENANTRY_MOVE_TARGET_MASTER_KEY",
        doc="The target cell's key, with `TENANTRY_MOVE_SOURCE_MASTER_KEY` (the row above).",
    ),
    Variable(
        "TENANTRY_CELL_OPERATOR_TOKEN",
        flag="--operator-token",
        help="The cell's TENANTRY_OPERATOR_TOKEN (the router calls its /admin/v1 with it).",
        doc=(
            "For `tenantry cells add`: the cell's own `TENANTRY_OPERATOR_TOKEN`, kept in the "
            "directory; the router calls that cell's `/admin/v1` with it. The router's own "
            "operator token is its `TENANTRY_OPERATOR_TOKEN` (required by `tenantry router`)."),
    ),
    Variable(
        "TENANTRY_DB_ROLE",
        field="db_role",
        parse=Parse.AS_IS,
        doc=(
            "Role every application connection switches to (a connection startup parameter), so "
            "row-level security applies; the console's pool switches to `tenantry_console` "
            "likewise. Set but empty: no switch — the login user's own rights apply. Serving "
            "logins that are superusers or have `BYPASSRLS` are warned about at start-up "
            "([database roles](database-roles.md))."),
    ),
    Variable(
        "TENANTRY_DB_POOL_MIN",
        field="db_pool_min",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Connections the API's pool opens at start (≥ 1, ≤ max); worker pools open 2. Not a "
            "floor: after an outage connections are reopened as requests need them. Every "
            "connection attempt gives up after 5 s."),
    ),
    Variable(
        "TENANTRY_DB_POOL_MAX",
        field="db_pool_max",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Maximum connections in the API's pool and in each worker loop's pool (≥ 1; keep it ≥"
            " 2 when workers run). Each also holds one more connection for `LISTEN`."),
    ),
    Variable(
        "TENANTRY_MAX_BODY_BYTES",
        field="max_body_bytes",
        parse=Parse.INTEGER,
        minimum=1024,
        default="`1048576` (1 MiB)",
        doc=(
            "Largest request body for POST/PUT/PATCH, in bytes (≥ 1024); larger answers `413 "
            "payload_too_large`."),
    ),
    Variable(
        "TENANTRY_SSE_MAX_STREAMS",
        field="sse_max_streams",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--sse-max-streams",
        help="Open event streams this process serves; past it 429.",
        doc=(
            "Open event streams (`GET /v1/runs/{run_id}/events` as SSE, and the console's run "
            "streams) one API process serves at once (integer ≥ 1); one more answers `429 "
            "overloaded` with `Retry-After`. An idle stream holds no database connection, only a "
            "socket and a task."),
    ),
    Variable(
        "TENANTRY_SSE_MAX_STREAMS_PER_TENANT",
        field="sse_max_streams_per_tenant",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--sse-max-streams-per-tenant",
        help="Open event streams per tenant in this process; past it 429.",
        doc=(
            "Open event streams of one tenant in one API process (integer ≥ 1); one more answers "
            "the same `429 overloaded` as the process cap (the answer does not say which cap, nor"
            " how many streams anyone holds). A tenant console run page's stream counts as the"
            " tenant's; the operator console's streams count against the process cap only."),
    ),
    Variable(
        "TENANTRY_CONSOLE_SECURE_COOKIE",
        field="console_secure_cookie",
        parse=Parse.LOWER,
        flag="--console-secure-cookie",
        help="auto (Secure over https), true (always: behind a TLS proxy) or false.",
        doc=(
            "The console cookies' `Secure` flag: `auto` sets it when the request reached uvicorn "
            "over https (directly, or through a proxy whose `X-Forwarded-Proto` uvicorn trusts); "
            "`true` always sets it — behind a TLS-terminating proxy uvicorn does not trust, where"
            " every request looks like plain http; `false` never does (plain-http development off"
            " loopback). Other values are refused."),
    ),
    Variable(
        "TENANTRY_LOG_FORMAT",
        field="log_format",
        doc=(
            "`auto` (JSON lines when stderr is not a terminal, text when it is), `json` or "
            "`text`."),
    ),
    Variable(
        "TENANTRY_URL",
        flag="--url",
        help="The platform's API base URL.",
        default="`http://127.0.0.1:8080`",
        doc=(
            "The platform's API base URL, for the commands that talk to a running platform "
            "(`tenants`, `runs`, `approvals`, `evaluations`, `agents`, `tool-servers`, "
            "`secrets`, `api-keys`, `audit`, `users`, `exports`, `webhooks`, "
            "`model-accounts`, `usage`, `prices`, `billing`) "
            "and for the [client "
            "SDK](../how-to/client-sdk.md), which reads it itself (it installs without the "
            "server)."),
    ),
    Variable(
        "TENANTRY_API_KEY",
        flag="--api-key",
        help="A tenant API key.",
        doc=(
            "A tenant API key, for the commands that act as a tenant (`runs`, `approvals`, "
            "`evaluations`, `agents`, `tool-servers`, `secrets`, `api-keys`, `audit`, "
            "`users`, `exports`, `webhooks`, `model-accounts`, `usage`; with `--tenant` "
            "those act on that tenant as the operator instead: "
            "[CLI](../reference/cli.md#as-the-operator---tenant)) and for the "
            "client SDK, which reads "
            "it itself."),
    ),
)
