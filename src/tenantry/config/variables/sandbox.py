"""The variables of the vault, the sandboxes and the browser, the blob store, billing's
provider reports and scheduled reconciliation, and the ones only tests and development
read."""

from __future__ import annotations

from tenantry.config.variable import Parse, Variable

#: A browser microVM's RAM holds its 317 MB initramfs and, while the kernel unpacks it, the
#: unpacked copy too: measured under TCG, 768 MiB does not boot, 1024 MiB boots and renders.
MIN_BROWSER_MEMORY_MIB = 1024

SANDBOX = (
    Variable(
        "TENANTRY_MASTER_KEY",
        field="master_key",
        doc=(
            "Vault master key: base64 of 32 bytes; wraps every tenant's data key. Set it on the "
            "API and every worker in production. Unset: `<data dir>/master_key`, which `tenantry "
            "up` creates (mode 0600) on first start and `api`/`worker` read if present; with "
            "neither, secrets cannot be stored or used ([the master "
            "key](../how-to/run-tenantry.md#the-master-key)). An invalid value stops "
            "`api`/`worker` with exit status 2 and `up` with a traceback."),
    ),
    Variable(
        "TENANTRY_NEW_MASTER_KEY",
        flag="--new-key",
        help="The new master key (base64, 32 bytes).",
        doc="`tenantry vault rotate-master-key` only: the key to rotate to (base64, 32 bytes).",
    ),
    Variable(
        "TENANTRY_SANDBOX_BACKEND",
        field="sandbox_backend",
        doc=(
            "`microvm`, `gvisor`, `bwrap` or `none` (code tools answer that execution is "
            "unavailable); any other value is refused. Unset: probed — microvm if QEMU and a "
            "built guest image exist, else gvisor, else bwrap "
            "([sandboxes](../how-to/sandboxes.md)). Read by workers."),
    ),
    Variable(
        "TENANTRY_SANDBOX_IMAGE_DIR",
        field="sandbox_image_dir",
        parse=Parse.PATH,
        flag="--image-dir",
        help="Where guest images are kept.",
        default="`<data dir>/sandbox`",
        doc=(
            "Where `tenantry sandbox build-image` puts the guest image (and the downloaded .debs)"
            " and where workers keep microVM templates."),
    ),
    Variable(
        "TENANTRY_SANDBOX_POOL_SIZE",
        field="sandbox_pool_size",
        parse=Parse.INTEGER,
        minimum=0,
        doc="Warm sandboxes each worker keeps started and paused (integer ≥ 0).",
    ),
    Variable(
        "TENANTRY_SANDBOX_MEMORY_MIB",
        field="sandbox_memory_mib",
        parse=Parse.INTEGER,
        minimum=64,
        doc=(
            "Memory per sandbox: the microVM's RAM, the cgroup limit for gvisor/bwrap (≥ 64; "
            "gvisor uses at least 512)."),
    ),
    Variable(
        "TENANTRY_SANDBOX_BROWSER_MEMORY_MIB",
        field="sandbox_browser_memory_mib",
        parse=Parse.INTEGER,
        minimum=MIN_BROWSER_MEMORY_MIB,
        doc=(
            "Memory of a browser sandbox (an agent that lists a `browser_*` tool): the microVM's "
            "guest RAM for the browser image variant (its 317 MB initramfs is unpacked in RAM, so"
            " at least 1024; 768 does not boot), and the cgroup limit of a browser sandbox on "
            "gvisor/bwrap. Read by workers. See [the browser](../how-to/browser.md)."),
    ),
    Variable(
        "TENANTRY_BROWSER_PAGE_TIMEOUT_SECONDS",
        field="browser_page_timeout_seconds",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "One browser action's page-load limit: past it the page is stopped and the model "
            "reads what had loaded, with an `error` saying so (≥ 1). Read by workers."),
    ),
    Variable(
        "TENANTRY_BROWSER_MAX_PAGES",
        field="browser_max_pages",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Pages one run's browser may load (opens, and navigations a click or key caused); "
            "past it the browser tools answer a tool error (≥ 1). Read by workers."),
    ),
    Variable(
        "TENANTRY_BROWSER_MAX_MIB",
        field="browser_max_mib",
        parse=Parse.INTEGER,
        minimum=1,
        doc=(
            "Bytes (MiB) one run's browser may load; past it, it opens no more pages (≥ 1). Read "
            "by workers."),
    ),
    Variable(
        "TENANTRY_BROWSER_DEV_BACKENDS",
        field="browser_dev_backends",
        parse=Parse.SWITCH,
        doc=(
            "`true`/`1`/`yes` lets the browser run on the `bwrap` backend (development machines: "
            "bwrap shares the host's kernel); unset or `false`: the browser tools answer that the"
            " browser is not available there (code tools still run). Other values are refused. "
            "Read by workers."),
    ),
    Variable(
        "TENANTRY_SANDBOX_WORK_MIB",
        field="sandbox_work_mib",
        parse=Parse.INTEGER,
        minimum=8,
        doc=(
            "Size of a sandbox's `/work` in all, and of any one file in it (≥ 8). Writes past it "
            "fail with ENOSPC inside the sandbox. On gvisor and bwrap `/work` is a tmpfs counted "
            "in the sandbox's memory limit; on microvm it is the guest's own disk."),
    ),
    Variable(
        "TENANTRY_SANDBOX_TIMEOUT_SECONDS",
        field="sandbox_timeout_seconds",
        parse=Parse.INTEGER,
        minimum=1,
        doc="Longest one execution may run (≥ 1); past it the result is exit code 124.",
    ),
    Variable(
        "TENANTRY_SANDBOX_HIBERNATE_SECONDS",
        field="sandbox_hibernate_seconds",
        parse=Parse.INTEGER,
        minimum=0,
        doc=(
            "How long a parked run's paused sandbox is kept before it is destroyed (its files are"
            " saved at the park either way; ≥ 0)."),
    ),
    Variable(
        "TENANTRY_SANDBOX_MIN_BOUNDARY",
        field="sandbox_min_boundary",
        flag="--sandbox-min-boundary",
        help=(
            "Weakest sandbox boundary a worker starts with: microvm, gvisor or bwrap; `worker` "
            "refuses below it, `up` warns."),
        doc=(
            "The weakest sandbox boundary a worker starts with, strongest first: `microvm` > "
            "`gvisor` > `bwrap`. A microVM whose QEMU runs without its own network namespace, "
            "unprivileged uid and cgroup (the worker is not root, or cgroup v1 is missing) ranks "
            "between `gvisor` and `bwrap`. `tenantry worker` exits 2 with one line (the boundary,"
            " why nothing stronger works, how to fix it) when the boundary it would get — probed "
            "or configured — is weaker; `tenantry up` starts anyway and prints a `warning:` line "
            "in its banner. `TENANTRY_SANDBOX_BACKEND=none` is never a downgrade; nothing "
            "working, unconfigured, is. `tenantry sandbox probe` shows what holds here."),
    ),
    Variable(
        "TENANTRY_SANDBOX_KEPT_MAX",
        field="sandbox_kept_max",
        parse=Parse.INTEGER,
        minimum=0,
        doc=(
            "Paused sandboxes of parked runs one worker process keeps (integer ≥ 0); past it the "
            "oldest of the tenant holding the most is hibernated at once (destroyed; its files "
            "were saved at the park, the run restores them when it resumes). Also caps the warm "
            "sandboxes of one `tenantry activity-worker` (ADR 0014; past it the oldest of the "
            "tenant keeping the most is destroyed)."),
    ),
    Variable(
        "TENANTRY_SANDBOX_KEPT_PER_TENANT",
        field="sandbox_kept_per_tenant",
        parse=Parse.INTEGER,
        minimum=0,
        doc=(
            "The same, per tenant in one worker process (integer ≥ 0): past it that tenant's own "
            "oldest is hibernated. For an activity worker's warm sandboxes the tenant's "
            "`max_activity_slots` caps them too (the smaller wins)."),
    ),
    Variable(
        "TENANTRY_BLOB_QUOTA_MIB",
        field="blob_quota_mib",
        parse=Parse.INTEGER,
        minimum=0,
        doc=(
            "Bytes each tenant may hold in the blob store (sandbox file saves, tool output over "
            "the cap, screenshots), in MiB (integer ≥ 0; `0`: no quota). Usage is counted in "
            "Postgres with every blob written and deleted (the same figure on every host, "
            "`tenantry_blob_bytes` on /metrics); a write past it is refused and nothing is "
            "written. A run whose sandbox files cannot be saved for a wait fails with `ours: "
            "false` and the reason. Read by workers."),
    ),
    Variable(
        "TENANTRY_BLOB_STORE",
        field="blob_store",
        parse=Parse.LOWER,
        doc=(
            "Where blobs' bytes live: `directory` (`<data dir>/blobs`, one host's disk: the "
            "embedded default) or `s3` (a bucket of an S3-compatible service, which every host "
            "of the cell shares: set `TENANTRY_S3_BUCKET` and the `TENANTRY_S3_*` below; "
            "[ADR 0042](../decisions/0042-object-storage.md)). Any other value stops start-up "
            "with an error."),
    ),
    Variable(
        "TENANTRY_S3_ENDPOINT",
        field="s3_endpoint",
        doc=(
            "The S3 service's URL, `http://` or `https://`, host and optional port (no path, "
            "no credentials), e.g. `http://seaweedfs:8333`. `http://` is used only when written"
            " here. Unset: AWS S3 in `TENANTRY_S3_REGION`."),
    ),
    Variable(
        "TENANTRY_S3_BUCKET",
        field="s3_bucket",
        doc=(
            "The bucket (3–63 characters of a-z, 0-9, `.`, `-`); required with "
            "`TENANTRY_BLOB_STORE=s3`. It must exist: it is not created. Objects are "
            "`<tenant id>/<ref>`, so a lifecycle rule or policy can act per tenant by prefix."),
    ),
    Variable(
        "TENANTRY_S3_REGION",
        field="s3_region",
        doc="The bucket's region (what requests are signed for; self-hosted servers accept "
            "any).",
    ),
    Variable(
        "TENANTRY_S3_ACCESS_KEY_ID",
        field="s3_access_key_id",
        doc=(
            "The access key id for the bucket; with `TENANTRY_S3_SECRET_ACCESS_KEY` (both or "
            "neither). Neither: the AWS credential chain (`AWS_*` variables, web identity, the"
            " instance's role). Logs and errors show its first and last 4 characters."),
    ),
    Variable(
        "TENANTRY_S3_SECRET_ACCESS_KEY",
        field="s3_secret_access_key",
        doc=(
            "The secret of `TENANTRY_S3_ACCESS_KEY_ID`. Secret: sent to no one (requests are "
            "signed with it), never logged or shown in an error."),
    ),
    Variable(
        "TENANTRY_S3_PATH_STYLE",
        field="s3_path_style",
        parse=Parse.SWITCH,
        default="`true` with an endpoint, else `false`",
        doc=(
            "`true`: the bucket goes in the path (`http://host/bucket/key`, what self-hosted "
            "servers expect); `false`: in the host name (`https://bucket.host/key`, AWS's "
            "way; needs a host name, not an address)."),
    ),
    Variable(
        "TENANTRY_PROVIDER_ADMIN_KEY",
        flag="--admin-key",
        help=(
            "The provider's admin key for --fetch (prefer the environment variable: a flag is "
            "visible to other users of the machine)."),
        doc=(
            "`tenantry billing reconcile --fetch` only: the provider's admin key for its usage "
            "and cost reports (OpenAI and Anthropic issue these separately from API keys). Sent "
            "to the provider's report endpoints only; never stored or logged "
            "([billing](../how-to/billing.md))."),
    ),
    Variable(
        "TENANTRY_RECONCILE_ADMIN_KEYS",
        field="reconcile_admin_keys",
        parse=Parse.NAMES,
        doc=(
            "The scheduled billing reconciliation's admin keys, as comma-separated "
            "`account=key` pairs (`bill-oa=sk-admin-…,bill-an=sk-ant-admin…`): each enabled "
            "operator model account of OpenAI or Anthropic named here has its previous UTC day "
            "reconciled daily with the provider's report ([scheduled "
            "reconciliation](../how-to/billing.md#scheduled-reconciliation)); accounts not named"
            " are not. Secret: sent to the provider's report endpoints only, never stored or "
            "logged. A pair that is not `account=key` stops the worker. Read by workers."),
    ),
    Variable(
        "TENANTRY_OPERATOR_WEBHOOK_URL",
        field="operator_webhook_url",
        doc=(
            "The operator's webhook: the scheduled billing reconciliation POSTs a JSON "
            "notification to it once per account, day and kind when a day differs by more than "
            "1% (`billing.reconciliation.flagged`) or its report is late "
            "(`billing.reconciliation.late`), tried up to 5 times with backoff ([scheduled "
            "reconciliation](../how-to/billing.md#scheduled-reconciliation)). Any http(s) URL, "
            "private addresses included (it is the operator's); anything else stops the worker."
            " Unset: no notifications (the metrics still show both). Read by workers."),
    ),
    Variable(
        "TENANTRY_OPERATOR_WEBHOOK_SECRET",
        field="operator_webhook_secret",
        doc=(
            "Signs the operator's webhook as tenants' webhooks are signed: `Tenantry-Signature:"
            " t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">`. Unset: not signed. "
            "Read by workers."),
    ),
    Variable(
        "TENANTRY_SANDBOX_DEBUG",
        doc=(
            "`1`: the microVM guest's serial console goes to the instance's `console.log` "
            "(development)."),
    ),
    Variable(
        "TENANTRY_TEST_DATABASE_URL",
        doc=(
            "Tests only: the Postgres the suite creates its databases in (a superuser URL is "
            "simplest). Unset: `postgresql://postgres@127.0.0.1:5432/postgres` if port 5432 "
            "answers, else a private embedded Postgres."),
    ),
    Variable(
        "TENANTRY_RECORD_CORPUS",
        doc=(
            "Tests only: `1` makes `tests/integration/test_replay.py`, `test_replay_gate.py` and "
            "the tests that call `check_and_record` rewrite their files in `tests/replay_corpus/`"
            " (see [replay](../how-to/replay.md#when-a-change-is-intended))."),
    ),
)
