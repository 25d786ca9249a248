"""The worker side of ``/metrics``: what the worker loops of one process did, by tenant
*class* (the tenant's plan), never by tenant id (invariant 10).

One :class:`WorkerMetrics` per process, built by the factory that starts the worker loops
(``tenantry.bootstrap.worker``; the tests build their own) and handed to each loop's
``Engine``. In ``tenantry up`` the API's ``/metrics`` renders it together with the database
gauges; a standalone ``tenantry worker`` serves it on ``--metrics-port``. Counters restart
at zero with the process, as Prometheus expects; the ledger, not these, holds spending authority."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from tenantry.telemetry.registry import DEFAULT_BUCKETS, Registry, Sample
from tenantry.telemetry.spans import NoSpans, StepSpans

if TYPE_CHECKING:
    from tenantry.sandbox.manager import SandboxManager

#: Label value while a tenant's class is not known to this process (yet).
UNKNOWN_CLASS = "unknown"
#: Model call outcomes the gateway reports; anything else is counted as "error".
MODEL_OUTCOMES = frozenset({"ok", "error", "rate_limited", "unusable", "refused"})
BREAKER_STATES = ("closed", "open", "half_open")
#: Platform time per step: the default buckets plus 0.15 s, the step service level's
#: threshold (deploy/monitoring/tenantry.rules.yml counts steps under it from this bucket).
STEP_BUCKETS = tuple(sorted({*DEFAULT_BUCKETS, 0.15}))


class HasBreakers(Protocol):
    def breaker_states(self) -> dict[str, str]: ...


class WorkerMetrics:
    def __init__(self, registry: Registry | None = None, *,
                 spans: StepSpans | None = None) -> None:
        self.registry = registry or Registry()
        self.spans: StepSpans = spans or NoSpans()
        # tenant id → class, learned when a worker loads a run (bounded by the tenants).
        self._classes: dict[str, str] = {}
        r = self.registry
        self.queue_wait = r.histogram(
            "tenantry_queue_wait_seconds",
            "From a run's creation to the first worker picking it up. By tenant class.",
            ("tenant_class",))
        self.step_platform = r.histogram(
            "tenantry_step_platform_seconds",
            "Platform time per step: the step's wall time minus model and tool time. "
            "By tenant class.", ("tenant_class",), buckets=STEP_BUCKETS)
        self.model_calls = r.counter(
            "tenantry_model_calls_total",
            "Calls to model provider accounts (each attempt of the failure ladder), by "
            "tenant class, provider, account and outcome.",
            ("tenant_class", "provider", "account", "outcome"))
        self.model_errors = r.counter(
            "tenantry_model_errors_total",
            "Model calls that did not answer (every outcome but ok), by tenant class, "
            "provider and account.", ("tenant_class", "provider", "account"))
        self.budget_refusals = r.counter(
            "tenantry_budget_refusals_total",
            "Model calls a budget refused, by tenant class and limit: tokens_per_minute "
            "(the run steps aside until the bucket refills), monthly_spend_cap_micros (the "
            "run waits until the cap is raised or the month ends), or an agent limit "
            "(max_steps, max_tokens, max_cost_micros, repeat_limit) that stopped the run.",
            ("tenant_class", "limit"))
        self.repeats = r.counter(
            "tenantry_repeats_total",
            "Repeats caught by repeat detection (ADR 0031), by tenant class and outcome: "
            "told (the call was refused with a tool error naming the repeat) or stopped "
            "(the model repeated again; the run stopped with reason repeating).",
            ("tenant_class", "outcome"))
        self.runs_ended = r.counter(
            "tenantry_worker_runs_ended_total",
            "Runs this process's workers ended, by tenant class and status.",
            ("tenant_class", "status"))
        self.runs_ended_by_cause = r.counter(
            "tenantry_runs_ended_by_cause_total",
            "Runs this process's workers ended, by tenant class and whose doing the end "
            "was: completed, ours (a platform fault), tenant (its limits, configuration or "
            "quota), model (the provider refused, or the model replied with nothing), "
            "cancelled. The table is runs/end_causes.py.", ("tenant_class", "cause"))
        self.child_runs_started = r.counter(
            "tenantry_child_runs_started_total",
            "Child runs started by runs' start_agent calls, by the tenant's class.",
            ("tenant_class",))
        self.model_snapshot_changes = r.counter(
            "tenantry_model_snapshot_changes_total",
            "Provider model snapshot changes noticed: a provider answered an agent's model "
            "with another snapshot than the one accepted (counted once per change, by the "
            "worker that noticed it), by tenant class.",
            ("tenant_class",))
        self.runs_left_for_newer_worker = r.counter(
            "tenantry_runs_left_for_newer_worker_total",
            "Runs a worker claimed and handed back untouched because their log holds an "
            "event type or format newer than it knows (a rolling upgrade), by tenant class.",
            ("tenant_class",))
        self.sandbox_claim = r.histogram(
            "tenantry_sandbox_claim_seconds",
            "Time for a run's sandbox to be ready (warm-pool claim, restore or boot), by "
            "tenant class, backend and whether it came warm from the pool.",
            ("tenant_class", "backend", "warm"))
        self.egress_refused = r.counter(
            "tenantry_egress_refused_total",
            "Egress attempts from runs' sandboxes that the proxy refused, by tenant class "
            "and reason: not_allowed (off the allow-list), internal_address, "
            "metadata_address.", ("tenant_class", "reason"))
        for name, text in (
            ("tenantry_model_account_breakers",
             "Model account circuit breakers in each state (one per account per worker "
             "loop in this process)."),
            ("tenantry_tool_server_breakers",
             "Tool server circuit breakers in each state, by tenant class."),
            ("tenantry_sandbox_pool_ready", "Warm sandboxes ready to claim, by backend."),
            ("tenantry_sandbox_pool_target", "Warm pool size aimed for, by backend."),
            ("tenantry_sandbox_pool_last_claim_seconds",
             "Latency of the most recent sandbox claim, by backend."),
            ("tenantry_sandboxes_live", "Sandboxes held for runs, by backend."),
            ("tenantry_worker_leases_held",
             "Runs held by this process's worker loops, by tenant class."),
        ):
            r.gauge(name, text)
        r.gauge("tenantry_sandbox_pool_claims_total",
                "Sandbox claims since start, by backend and kind (warm from the pool, cold "
                "launch).", "counter")

    # -- tenant classes -------------------------------------------------------------

    def learn_class(self, tenant: str, tenant_class: str) -> None:
        self._classes[tenant] = tenant_class or UNKNOWN_CLASS

    def class_of(self, tenant: str) -> str:
        return self._classes.get(tenant, UNKNOWN_CLASS)

    # -- events -----------------------------------------------------------------------

    def model_call(self, tenant: str, provider: str, account: str, outcome: str) -> None:
        """Called by the model gateway for every attempt on an account."""
        if outcome not in MODEL_OUTCOMES:
            outcome = "error"
        tenant_class = self.class_of(tenant)
        self.model_calls.inc(tenant_class, provider, account, outcome)
        if outcome != "ok":
            self.model_errors.inc(tenant_class, provider, account)

    # -- scrape-time gauges -------------------------------------------------------------

    def watch(
        self, *, model: object, tools: HasBreakers | None,
        sandboxes: SandboxManager | None = None,
        leases: Callable[[], Iterable[str]] | None = None,
    ) -> Callable[[], None]:
        """Report one worker loop's breakers, sandbox pool and held leases at each scrape
        (``leases``: the tenant ids of the runs it holds). Returns the un-register function."""

        def collect() -> Iterable[Sample]:
            samples: list[Sample] = []
            states = getattr(model, "breaker_states", None)
            if callable(states):
                for account, state in sorted(states().items()):
                    for known in BREAKER_STATES:
                        samples.append(("tenantry_model_account_breakers",
                                        (("account", account), ("state", known)),
                                        float(state == known)))
            if tools is not None:
                for key, state in tools.breaker_states().items():
                    tenant = key.partition("/")[0]
                    samples.append(("tenantry_tool_server_breakers",
                                    (("tenant_class", self.class_of(tenant)), ("state", state)),
                                    1.0))
            if sandboxes is not None:
                samples += _sandbox_samples(sandboxes)
            if leases is not None:
                for tenant in leases():
                    samples.append(("tenantry_worker_leases_held",
                                    (("tenant_class", self.class_of(tenant)),), 1.0))
            return samples

        return self.registry.add_collector(collect)

    def render(self) -> str:
        return self.registry.render()


def _sandbox_samples(sandboxes: SandboxManager) -> list[Sample]:
    label = (("backend", sandboxes.backend),)
    samples: list[Sample] = [("tenantry_sandboxes_live", label, float(sandboxes.live))]
    pool = sandboxes.pool()
    if pool is None:
        return samples
    stats = pool.stats
    samples += [
        ("tenantry_sandbox_pool_ready", label, float(pool.ready)),
        ("tenantry_sandbox_pool_target", label, float(pool.size)),
        ("tenantry_sandbox_pool_claims_total", (*label, ("kind", "warm")), float(stats.warm)),
        ("tenantry_sandbox_pool_claims_total", (*label, ("kind", "cold")), float(stats.cold)),
        ("tenantry_sandbox_pool_last_claim_seconds", label, stats.claim_ms_last / 1000),
    ]
    return samples
