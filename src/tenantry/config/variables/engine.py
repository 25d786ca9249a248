"""The variables of the engine: the configured model account, shedding, the workers,
leases, child runs, webhooks and retention."""

from __future__ import annotations

from tenantry.config.variable import Parse, Variable

ENGINE = (
    Variable(
        "TENANTRY_MODEL_BASE_URL",
        field="model_base_url",
        flag="--model-base-url",
        help="OpenAI-compatible endpoint; unset uses the built-in scripted model.",
        doc=(
            "One model endpoint from configuration: the account `configured`, serving any model "
            "in the `default` region after every registered [model "
            "account](../how-to/model-providers.md#accounts), as long as the model has a "
            "[price](../how-to/model-providers.md#pricing-a-model-the-platform-does-not-know) (a "
            "run on an unpriced model fails before anything is sent) (OpenAI style `…/v1`; "
            "Anthropic style the origin). Unset: each worker loop starts the built-in scripted "
            "model on a loopback port, serving the `scripted` models only. Read by workers."),
    ),
    Variable(
        "TENANTRY_MODEL_API_KEY",
        field="model_api_key",
        doc=(
            "The key for `TENANTRY_MODEL_BASE_URL` (`Authorization: Bearer …` for OpenAI style, "
            "`x-api-key` for Anthropic)."),
    ),
    Variable(
        "TENANTRY_MODEL_PROVIDER",
        field="model_provider",
        doc=(
            "The wire format of `TENANTRY_MODEL_BASE_URL`: `openai` or `anthropic`; anything else"
            " stops start-up with an error."),
    ),
    Variable(
        "TENANTRY_MODEL_NO_STREAM",
        field="model_no_stream",
        parse=Parse.NAMES,
        default="(none: every account streams)",
        doc=(
            "Model accounts the workers call without the provider's streaming mode, by account "
            "id, comma-separated (`configured` is `TENANTRY_MODEL_BASE_URL`'s account, `scripted`"
            " the built-in model's); `*` for all. For an OpenAI-compatible server that cannot "
            "stream or refuses `stream_options`; runs using those accounts get no live "
            "`model_delta` events ([ADR 0030](../decisions/0030-token-streaming.md))."),
    ),
    Variable(
        "TENANTRY_MAX_QUEUED_RUNS",
        field="max_queued_runs",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--max-queued-runs",
        help="From this many queued runs every new run is refused (503).",
        doc=(
            "Shedding, last level: with this many runs queued in the whole cell (every tenant, "
            "agent runs and library tasks), every new run gets `503 overloaded` (`shed: [\"batch\","
            " \"interactive\"]`) with `Retry-After`. The other two levels derive from it when unset"
            " ([shedding](../how-to/scheduling-and-budgets.md#under-overload-shedding)). Read by "
            "API and worker processes."),
    ),
    Variable(
        "TENANTRY_REFUSE_BATCH_RUNS_AT",
        field="refuse_batch_runs_at",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--refuse-batch-runs-at",
        help="From this many queued runs new batch runs are refused (503).",
        default="80% of `TENANTRY_MAX_QUEUED_RUNS` (`80000`)",
        doc=(
            "Shedding, second level: from this many runs queued in the cell, new `batch` runs get"
            " `503 overloaded` (`shed: [\"batch\"]`); interactive ones are still accepted. Integer "
            "≥ 1, at most `TENANTRY_MAX_QUEUED_RUNS`. Read by API processes."),
    ),
    Variable(
        "TENANTRY_DELAY_NEW_RUNS_AT",
        field="delay_new_runs_at",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--delay-new-runs-at",
        help=(
            "From this many queued runs in-flight runs of every tenant are claimed before new "
            "runs."),
        default="50% of `TENANTRY_MAX_QUEUED_RUNS` (`50000`)",
        doc=(
            "Shedding, first level: from this many runs queued in the cell, workers claim every "
            "tenant's in-flight runs (back from an approval, a park, a token wait) before the "
            "first step of any new run; new runs are still accepted. Integer ≥ 1, at most the "
            "batch level. Read by workers."),
    ),
    Variable(
        "TENANTRY_LOAD_READ_SECONDS",
        field="load_read_seconds",
        parse=Parse.INTEGER,
        minimum=0,
        doc=(
            "How often each API and worker process reads the cell's queued depth for the shedding"
            " levels, in whole seconds (≥ 0; `0`: on every request and claim — tests)."),
    ),
    Variable(
        "TENANTRY_CLAIM_ORDER",
        field="claim_order",
        doc=(
            "`fair` (the scheduler) or `fifo` (oldest run of any tenant, ignoring every tenant "
            "policy — only to measure what fairness buys; never in production). Read by workers."),
    ),
    Variable(
        "TENANTRY_WORKERS",
        field="workers",
        parse=Parse.INTEGER,
        minimum=0,
        flag="--workers",
        help="Worker loops in this process.",
        doc=(
            "Worker loops inside `tenantry up` (integer ≥ 0; `0` = API only). Each `tenantry "
            "worker` process runs one."),
    ),
    Variable(
        "TENANTRY_WORKER_CONCURRENCY",
        field="worker_concurrency",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--concurrency",
        help="Runs one worker process holds at once.",
        doc="Runs one worker loop holds at once (integer ≥ 1).",
    ),
    Variable(
        "TENANTRY_WORKER_PROCESSES",
        field="worker_processes",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--processes",
        help=(
            "Worker processes on this host, each its own event loop and --concurrency, under a "
            "supervisor that restarts one that dies; 1: this process alone."),
        default="one per CPU the command may run on",
        doc=(
            "Worker processes `tenantry worker` runs on this host, each its own event loop and "
            "`--concurrency`, under a supervisor that restarts one that exits "
            "([cli](cli.md#tenantry-worker)); `1`: the command's own process alone, no supervisor"
            " (integer ≥ 1). `tenantry up` is always one process."),
    ),
    Variable(
        "TENANTRY_ACTIVITY_WORKER_SLOTS",
        field="activity_worker_slots",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--slots",
        help="Activity attempts this process runs at once, one fresh sandbox each.",
        doc=(
            "Activity attempts one `tenantry activity-worker` (or the dispatcher inside `tenantry"
            " up`) runs at once, one fresh sandbox each (integer ≥ 1). Each tenant is also held "
            "to its own `max_activity_slots` across all activity workers."),
    ),
    Variable(
        "TENANTRY_OTEL_EXPORTER",
        field="otel_exporter",
        doc=(
            "OpenTelemetry spans, one per model call and tool call, with the run's and tenant's "
            "ids as attributes: `console` (stdout) or `otlp` (OTLP over HTTP; where to is read "
            "from the standard `OTEL_EXPORTER_OTLP_*` variables). Needs `pip install "
            "'tenantry[otel]'`. Unset or `none`: no spans, and OpenTelemetry is not imported. "
            "Read by workers."),
    ),
    Variable(
        "TENANTRY_WORKER_METRICS_PORT",
        field="worker_metrics_port",
        parse=Parse.INTEGER,
        minimum=1,
        flag="--metrics-port",
        help="Serve this process's /metrics (operator token) on this port; off by default.",
        doc=(
            "`tenantry worker` and `tenantry activity-worker` only: serve the process's "
            "`/metrics` (operator token: "
            "`TENANTRY_OPERATOR_TOKEN` or the data dir's) on `TENANTRY_HOST` and this port "
            "(1–65535); `tenantry worker` also answers `/readyz` there, without a token "
            "(docs/how-to/metrics.md). Unset: not served (in `tenantry up` the API's "
            "`/metrics` shows the workers' figures, and its `/readyz` their readiness)."),
    ),
    Variable(
        "TENANTRY_LEASE_SECONDS",
        field="lease_seconds",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Lease a worker takes on each run it claims, in whole seconds (≥ 1); renewed every "
            "third of it. A dead worker's runs resume elsewhere after about this long. Read by "
            "workers."),
    ),
    Variable(
        "TENANTRY_EGRESS_FLAG_THRESHOLD",
        field="egress_flag_threshold",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Refused egress attempts (hosts off the allow-list, internal or metadata addresses) "
            "from the sandboxes of one agent version, over all its runs — or of one activity "
            "version, over all its tasks' attempts — before that version is flagged for review: "
            "`flagged_for_review` in `GET /v1/agents/{id}` and `/versions/{n}` (`GET "
            "/v1/activities/{name}` and `/versions/{n}`), and the console's tenant page. Every "
            "attempt is refused either way; the flag only draws attention. Integer ≥ 1. Read by "
            "workers and activity dispatchers (`tenantry activity-worker`, the one in `tenantry "
            "up`); one value for the whole cell (hence no per-process flag)."),
    ),
    Variable(
        "TENANTRY_CHILD_MAX_DEPTH",
        field="child_max_depth",
        parse=Parse.INTEGER,
        minimum=0,
        doc=(
            "How deep a chain of [child runs](../how-to/child-runs.md) may go: a run nobody "
            "started is at depth 0, its children at 1; a `start_agent` call that would start a "
            "run deeper than this is answered with a tool error and starts nothing (`0`: no child"
            " runs at all). Integer ≥ 0. Read by workers."),
    ),
    Variable(
        "TENANTRY_CHILD_MAX_PER_RUN",
        field="child_max_per_run",
        parse=Parse.INTEGER,
        minimum=0,
        doc=(
            "How many child runs one run may start over its life; past it a `start_agent` call is"
            " answered with a tool error. Integer ≥ 0. Read by workers."),
    ),
    Variable(
        "TENANTRY_TENANT_TOOL_SERVER_HOSTS",
        field="tenant_tool_server_hosts",
        parse=Parse.NAMES,
        default="(none: any host with a public address)",
        doc=(
            "The hosts tool servers that tenants register themselves (`POST /v1/tool-servers`) "
            "may be at, comma-separated, in the agents' egress allow-list syntax "
            "(`mcp.example.com`, `*.example.com`, `host:8443`; without a port: 80 and 443). "
            "Whatever it allows, a name resolving to a loopback, private, link-local or "
            "metadata address is refused, and every connection goes to an address vetted "
            "then. Servers the operator registers are not held to it. Read by the API and "
            "workers."),
    ),
    Variable(
        "TENANTRY_TENANT_MODEL_ACCOUNT_HOSTS",
        field="tenant_model_account_hosts",
        parse=Parse.NAMES,
        default="(none: any host with a public address)",
        doc=(
            "The hosts model provider accounts that tenants register themselves "
            "(`POST /v1/model-accounts`, bring your own key) may be at, in the same syntax "
            "(`api.openai.com`, `*.openai.azure.com`, `llm.example.com:8443`), under the "
            "same rules as their tool servers: a name resolving to a loopback, private, "
            "link-local or metadata address is refused (unless "
            "`TENANTRY_TENANT_TOOL_SERVERS_ALLOW_PRIVATE`), and every connection goes to an "
            "address vetted then. Accounts the operator registers are not held to it. "
            "Read by the API and workers."),
    ),
    Variable(
        "TENANTRY_TENANT_TOOL_SERVERS_ALLOW_PRIVATE",
        field="tenant_tool_servers_allow_private",
        parse=Parse.SWITCH,
        doc=(
            "`true`/`1`/`yes` lets tool servers and model accounts that tenants register be "
            "at loopback, private and link-local addresses, and use `http` (development, "
            "tests: a server on this machine); `false`/`0`/`no` or unset refuses them (and "
            "`http`). Read by the API and workers."),
    ),
    Variable(
        "TENANTRY_WEBHOOK_ALLOW_PRIVATE",
        field="webhook_allow_private",
        parse=Parse.SWITCH,
        doc=(
            "`true`/`1`/`yes` lets webhooks go to loopback, private and link-local addresses "
            "(development, tests; the name is still resolved once and connected to by address); "
            "`false`/`0`/`no` or unset refuses them. Other values are refused. Read by workers."),
    ),
    Variable(
        "TENANTRY_WEBHOOK_DEADLINE_SECONDS",
        field="webhook_deadline_seconds",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "One webhook attempt's whole deadline in seconds (≥ 1): resolving, connecting, "
            "sending and reading the answer's status, together. An attempt still going then is "
            "abandoned and retried. Read by workers."),
    ),
    Variable(
        "TENANTRY_WEBHOOK_CONCURRENCY",
        field="webhook_concurrency",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Webhook deliveries one worker process has in flight at once (≥ 1), each in its own "
            "task beside the worker loop. Read by workers."),
    ),
    Variable(
        "TENANTRY_WEBHOOK_CONCURRENCY_PER_TENANT",
        field="webhook_concurrency_per_tenant",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Of those, at most this many for one tenant (1 … `TENANTRY_WEBHOOK_CONCURRENCY`), so "
            "one tenant's slow receivers cannot hold every slot. Read by workers."),
    ),
    Variable(
        "TENANTRY_RETENTION",
        field="retention",
        parse=Parse.ON_OFF,
        default="`on`",
        doc=(
            "`on`: each `tenantry worker` process (and `tenantry up`, once for all its worker "
            "loops) runs one retention cleaner beside its worker loop, on its database pool and "
            "blob store: terminal runs and tasks past their tenant's retention are deleted with a"
            " tombstone each, their blobs after the batch commits (ADR 0017). `off`: this "
            "process runs none — run it elsewhere (another worker, or `tenantry retention run` "
            "from cron). Cleaners in several processes share the work: one tenant at a time each,"
            " under its cleanup lease. Other values are refused. Read by workers."),
    ),
    Variable(
        "TENANTRY_RETENTION_BATCH",
        field="retention_batch",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Runs one retention batch deletes, each batch one transaction (integer 1–10000): "
            "bounds how long a batch holds its rows' locks and how much it writes at once. After "
            "each full batch the pass rests as long as the batch took, so a backlog never takes "
            "more than about half of one Postgres backend from the runs beside it. Read by "
            "workers."),
    ),
    Variable(
        "TENANTRY_RETENTION_EVERY_SECONDS",
        field="retention_every_seconds",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "How often each tenant's cleanup pass comes round, in whole seconds (≥ 1); the worker"
            " looks for due tenants every 5 s, or this often if sooner. A tenant being erased is "
            "passed over at every look. Read by workers."),
    ),
)
