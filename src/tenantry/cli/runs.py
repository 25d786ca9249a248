"""``tenantry runs show``, ``runs tail``, ``runs trace``, ``runs wait`` and ``runs list``: a
tenant's runs, read over the platform's public API with the client SDK
(``tenantry.client``), so they work against any deployment the caller can reach. ``show``,
``tail`` and ``trace`` take ``--tenant``: the operator reads any tenant's run with the
operator token (``tenantry.cli.operator``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tenantry.cli.common import fail
from tenantry.cli.help import App
from tenantry.cli.operator import Item, all_fields
from tenantry.cli.options import DEFAULT_URL, ApiKey, OnTenant, OperatorToken, Url
from tenantry.cli.remote import (
    PAGE,
    AsJson,
    ended,
    every_page,
    fetch,
    print_fields,
    sdk_client,
    show_table,
)
from tenantry.cli.run_trace import print_trace
from tenantry.cli.tables import Column
from tenantry.runs.events import (
    ABSENT,
    MONTHLY_SPEND_CAP,
    ApprovalDecided,
    ApprovalRequested,
    BudgetStopped,
    ModelFallback,
    ModelReplied,
    ModelRerouted,
    NewerEvent,
    RunFailed,
    RunFinished,
    RunParked,
    RunStatus,
    Summarized,
    ToolCompleted,
    parse,
)

runs_app = App(help="Look at runs (as a tenant: TENANTRY_API_KEY; any tenant's as the "
                    "operator: --tenant).")
RunId = Annotated[str, typer.Argument(help="The run (run_…).")]

COLOURS = {"RunFinished": "green", "RunFailed": "red", "BudgetStopped": "red",
           "RunCancelled": "yellow", "ApprovalRequested": "magenta", "RunParked": "yellow",
           "ModelFallback": "yellow", "ModelRerouted": "yellow", "ModelReplied": "cyan",
           "Summarized": "cyan", "ToolCompleted": "blue"}


def summarize(event: dict[str, Any]) -> str:
    """One line a person can scan: what happened in this event."""
    try:
        payload = parse(str(event.get("type", "")), event.get("data") or {})
    except (NewerEvent, TypeError):  # a type, format or shape this client does not know
        return ""
    match payload:
        case ModelReplied() as reply:
            calls = ", ".join(c.get("name", "?") for c in reply.calls)
            return (f"{reply.model} via {reply.account}: "
                    f"{'calls ' + calls if calls else repr((reply.text or '')[:60])} "
                    f"({reply.usage.get('input_tokens', 0)}→"
                    f"{reply.usage.get('output_tokens', 0)} tokens, "
                    f"{reply.latency_ms or 0:.0f} ms)")
        case ToolCompleted() as done:
            return _tool_line(done)
        case ApprovalRequested(tool=tool, approval_id=approval_id):
            return f"{tool} waits for approval {approval_id}"
        case ApprovalDecided(decision=decision, comment=comment):
            return f"{decision} {comment or ''}".strip()
        case RunFinished(answer=answer):
            return str(answer)[:100]
        case RunFailed(error=error):
            return str(error)[:100]
        case RunParked(reason=reason, until=until) if reason == MONTHLY_SPEND_CAP:
            return f"waits for the monthly spend cap: until it is raised or {until}"[:100]
        case RunParked(reason=reason):
            return str(reason)[:100]
        case ModelFallback(from_=from_, to=to, reason=reason) | ModelRerouted(
                from_=from_, to=to, reason=reason):
            return f"{from_} → {to}: {reason}"
        case Summarized() as summary:
            return (f"summary of the steps up to seq {summary.upto_seq} by {summary.model} "
                    f"({summary.usage.get('input_tokens', 0)}→"
                    f"{summary.usage.get('output_tokens', 0)} tokens)")
        case BudgetStopped(limit=limit, used=used, max=maximum, reason=reason):
            return f"{limit}: {used} of {maximum}" + (f" ({reason})" if reason else "")
    return ""


def _tool_line(done: ToolCompleted) -> str:
    if done.arguments is None:
        # Refused before it was made (denied, expired, not allowed, bad arguments): no
        # server, no time, and the reason is what the reader is after.
        return f"{done.tool} refused: {str(done.error or 'no reason recorded')[:300]}"
    server = None if done.server is ABSENT else done.server
    where = server or (done.sandbox or {}).get("backend")
    if done.outcome == "unknown":
        outcome = "outcome unknown"
    else:
        outcome = "ok" if done.error is None else "error: " + str(done.error)[:100]
    place = f" [{where}]" if where else ""
    took = "" if done.duration_ms is None else f" ({done.duration_ms:.0f} ms)"
    return f"{done.tool}{place} {outcome}{took}"


@runs_app.command("show")
def show(run_id: RunId, url: Url = DEFAULT_URL, api_key: ApiKey = None,
         tenant: OnTenant = None, operator_token: OperatorToken = None,
         as_json: AsJson = False) -> None:
    """One run: every field the API answers (status, agent, input, answer, usage, cost)."""
    run = fetch(url, api_key, lambda client: client.runs.get(run_id), tenant=tenant,
                operator_token=operator_token)
    print_fields(Item(run.raw), as_json, all_fields)


@runs_app.command("trace")
def trace(run_id: RunId, url: Url = DEFAULT_URL, api_key: ApiKey = None,
          tenant: OnTenant = None, operator_token: OperatorToken = None,
          as_json: AsJson = False) -> None:
    """Where a run's time went: its spans (queue, platform, gateway, model and tool calls,
    approval and parked waits) with start and duration, its fallbacks, child runs and
    budget stop, and the totals (tokens, cost) — what the console's waterfall shows."""
    print_trace(fetch(url, api_key, lambda client: client.runs.trace(run_id), tenant=tenant,
                      operator_token=operator_token), as_json)


@runs_app.command("tail")
def tail(
    run_id: Annotated[str, typer.Argument(help="The run to follow (run_…).")],
    url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
    operator_token: OperatorToken = None,
) -> None:
    """Follow a run's events live until it ends (Ctrl-C to stop watching); a dropped
    connection is resumed where it stopped."""
    from rich.console import Console
    from rich.markup import escape

    from tenantry.client import Event

    console = Console(highlight=False)
    try:
        with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client, \
                client.runs.events(run_id) as events:
            for event in events:
                if not isinstance(event, Event):
                    continue  # a model reply's pieces as it is written: the reply follows
                kind = event.type
                at = event.created_at.strftime("%H:%M:%S.%f")[:-3]
                console.print(f"{event.seq:>4} {at} [{COLOURS.get(kind, 'white')}]"
                              f"{kind:<18}[/] {escape(summarize(dict(event.raw)))}",
                              markup=True)
                if event.terminal:
                    raise typer.Exit(0 if kind == "RunFinished" else 1)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


# How often `runs wait` reads the run at most: a status is one indexed row, and a person
# waiting at a shell prompt does not notice a fifth of a second.
WAIT_POLL_SECONDS = 0.2


@runs_app.command("wait")
def wait(
    run_id: Annotated[str, typer.Argument(help="The run to wait for (run_…).")],
    url: Url = DEFAULT_URL, api_key: ApiKey = None,
    status: Annotated[list[str] | None, typer.Option(
        "--status", help="The status to wait for (repeat for any of several): queued, "
                         "running, waiting, finished, failed or cancelled. "
                         "Default: finished.")] = None,
    timeout: Annotated[float, typer.Option(
        min=0, help="Give up after this many seconds (exit status 1).")] = 60.0,
) -> None:
    """Wait until a run has a status (default: finished), then print it.

    Exit status 0 once it has; 1 on timeout, or when the run ended in another status (it
    cannot reach the one asked for), printing the status it has; 2 on bad input."""
    from tenantry.client import WaitTimeout

    valid = {s.value for s in RunStatus}
    wanted = {s.strip().lower() for s in status or ["finished"]}
    if not wanted <= valid:
        fail(f"--status {', '.join(sorted(wanted - valid))}: not a run status "
              f"(one of {', '.join(s.value for s in RunStatus)})")
    try:
        with sdk_client(url, api_key, timeout=10) as client:
            try:
                run = client.runs.wait(run_id, status=wanted, timeout=timeout,
                                       poll_interval=WAIT_POLL_SECONDS)
            except WaitTimeout as exc:
                current = exc.run.status if exc.run is not None else "unknown"
                ended(current, f"timed out after {timeout:g} s; the run is {current}")
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if run.status not in wanted:
        ended(run.status, f"{run.status} (ended; not {' or '.join(sorted(wanted))})")
    typer.echo(run.status)


@runs_app.command("list")
def list_runs(
    url: Url = DEFAULT_URL, api_key: ApiKey = None,
    status: Annotated[str | None, typer.Option(help="queued, running, waiting, finished, "
                                               "failed or cancelled")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="How many runs.")] = 20,
) -> None:
    """The most recent runs, newest first."""
    with sdk_client(url, api_key) as client:
        page = client.runs.list(status=status, limit=limit)
        # The agent's name is what a person recognises; one more request for every agent.
        names = {agent.agent_id: agent.name for agent in every_page(
            lambda cursor: client.agents.list(limit=PAGE, cursor=cursor))}
    rows = [[run.run_id, names.get(run.agent_id, ""), str(run.version), run.status,
             str(run.steps), f"{run.usage.input_tokens}/{run.usage.output_tokens}",
             f"{run.cost_micros / 1e6:.4f}", run.created_at.strftime("%Y-%m-%dT%H:%M:%S"),
             run.agent_id]
            for run in page]
    # The agent's id last: scripts read it from a pipe, and a narrow terminal shows the
    # name in its place.
    show_table(["run", "agent", "v", "status", "steps", "tokens in/out", "cost $",
                "created (UTC)", Column("agent_id", hide_first=True)], rows)
