"""``tenantry evaluations show/start`` and ``tenantry agents promote``: an agent's
evaluations read and started over the tenant API with the client SDK (TENANTRY_URL,
TENANTRY_API_KEY), shown side by side so a person can decide what goes live.

Exit status: 0 the evaluation passed (or was started, or is still running); 1 it finished
with a case the candidate failed (or ``--wait`` timed out, or a promotion was refused);
2 bad input, configuration, or an error answer from the platform (one line, no trace)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tenantry.cli.common import fail
from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, ApiKey, Url
from tenantry.cli.remote import AsJson, sdk_client, sdk_failure

if TYPE_CHECKING:
    from rich.console import Console

    from tenantry.client import Evaluation, EvaluationSide

evaluations_app = App(help="An agent's evaluations: a candidate against a baseline, case by "
                           "case (as a tenant: TENANTRY_API_KEY).")
agents_app = App(help="Agents (as a tenant: TENANTRY_API_KEY).")

#: How much of an answer a table cell shows; --json has all of it.
ANSWER_CHARS = 80
DETAIL_CHARS = 160
#: How often --wait reads the evaluation at most (a report is a few indexed reads).
WAIT_POLL_SECONDS = 0.5

Wait = Annotated[bool, typer.Option("--wait", help="Wait until every run of it has "
                                                   "ended, then show it.")]
Timeout = Annotated[float, typer.Option(min=0, help="With --wait: give up after this many "
                                                    "seconds (exit status 1).")]


def _cut(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())  # one line per cell: newlines in an answer would not fit
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _mark(passed: bool | None) -> str:
    if passed is True:
        return "[green]✓[/]"
    if passed is False:
        return "[red]✗[/]"
    return "[yellow]…[/]"


def _side_cell(side: EvaluationSide) -> str:
    from rich.markup import escape

    if side.status is None:
        return "[dim]run deleted[/]"
    if side.passed is None:
        return f"[yellow]… {escape(side.status)}[/]"
    shown = side.answer if side.answer is not None else side.error
    what = "" if shown is None else escape(_cut(shown, ANSWER_CHARS))
    if side.error is not None and side.answer is None:
        what = f"[red]{side.status}:[/] {what}"
    return f"{_mark(side.passed)} {what}"


def _numbers(side: EvaluationSide) -> str:
    if side.steps is None:
        return ""
    latency = "" if side.latency_ms is None else f" · {side.latency_ms:.0f} ms"
    return (f"{side.steps} steps · {side.tokens or 0:,} tok · "
            f"${(side.cost_micros or 0) / 1e6:.4f}{latency}")


def _cost(micros: int) -> str:
    return f"${micros / 1e6:.4f}"


def render(evaluation: Evaluation, console: Console) -> None:
    """The header, then one row per case with both sides and what differs, then totals."""
    from rich.markup import escape
    from rich.table import Table

    e = evaluation
    if e.passed is True:
        verdict = "[bold green]passed[/]: the candidate passed every case"
    elif e.passed is False:
        failing = sum(1 for c in e.cases if c.candidate.passed is False)
        verdict = (f"[bold red]failed[/]: the candidate failed {failing} of {len(e.cases)} "
                   "case(s)")
    else:
        verdict = "[yellow]not decided yet[/]"
    console.print(f"[bold]Evaluation[/] {e.evaluation_id}  agent {e.agent_id}  test set "
                  f"{e.test_set_id}")
    console.print(f"baseline [bold]{escape(str(e.baseline))}[/]  vs  candidate "
                  f"[bold]{escape(str(e.candidate))}[/]  ·  status {e.status}  ·  {verdict}")
    table = Table(show_lines=True)
    table.add_column("case", overflow="fold")
    table.add_column(f"baseline {escape(str(e.baseline))}", overflow="fold", ratio=3)
    table.add_column(f"candidate {escape(str(e.candidate))}", overflow="fold", ratio=3)
    table.add_column("differences", overflow="fold")
    table.add_column("failed checks", overflow="fold", ratio=3)
    for case in e.cases:
        base, cand = case.baseline, case.candidate
        if case.regressed:
            style, diff = "red", "[bold red]" + escape(", ".join(case.differences)) + "[/]"
        elif base.passed is False and cand.passed is True:
            style, diff = "", "[green]" + escape(", ".join(case.differences)) + "[/]"
        else:
            style, diff = "", "[yellow]" + escape(", ".join(case.differences)) + "[/]"
        failed = [f"{name}: {escape(c.check)}: {escape(_cut(c.detail, DETAIL_CHARS))}"
                  for name, side in (("baseline", base), ("candidate", cand))
                  for c in side.failed_checks]
        table.add_row(
            f"[{style}]{escape(case.name)}[/]" if style else escape(case.name),
            _side_cell(base) + (f"\n[dim]{_numbers(base)}[/]" if _numbers(base) else ""),
            _side_cell(cand) + (f"\n[dim]{_numbers(cand)}[/]" if _numbers(cand) else ""),
            diff if case.differences else "[dim]—[/]",
            "\n".join(failed) or "[dim]—[/]")
    cells = []
    for totals in (e.baseline_totals, e.candidate_totals):
        running = f", {totals.running} running" if totals.running else ""
        cells.append(f"{totals.passed} passed, {totals.failed} failed{running}\n"
                     f"{totals.steps} steps · {totals.tokens:,} tok · "
                     f"{_cost(totals.cost_micros)} · {totals.latency_ms:.0f} ms")
    table.add_row("[bold]totals[/]", *cells, "", "", end_section=True)
    console.print(table)


def _show(evaluation: Evaluation, as_json: bool) -> None:
    from rich.console import Console

    if as_json:
        typer.echo(json.dumps(dict(evaluation.raw), indent=2, ensure_ascii=False))
        return
    render(evaluation, Console(highlight=False))


def _exit_for(evaluation: Evaluation) -> None:
    if evaluation.finished and evaluation.passed is False:
        raise typer.Exit(1)


def _finish(client: Any, url: str, agent_id: str, evaluation: Evaluation, *, wait: bool,
            timeout: float, as_json: bool) -> None:
    """Show ``evaluation`` (once finished, with ``wait``) and exit as the module says."""
    from tenantry.client import ClientError, WaitTimeout

    if wait and not evaluation.finished:
        try:
            evaluation = client.evaluations.wait(agent_id, evaluation.evaluation_id,
                                                 timeout=timeout,
                                                 poll_interval=WAIT_POLL_SECONDS)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except WaitTimeout as exc:
            if exc.run is not None:
                _show(exc.run, as_json)
            typer.secho(f"timed out after {timeout:g} s; the evaluation is still running",
                        err=True)
            raise typer.Exit(1) from None
        except ClientError as exc:
            sdk_failure(url, exc)
    _show(evaluation, as_json)
    _exit_for(evaluation)


@evaluations_app.command("show")
def show(
    agent_id: Annotated[str, typer.Argument(help="The agent (agt_…).")],
    evaluation_id: Annotated[str, typer.Argument(help="The evaluation (eval_…).")],
    url: Url = DEFAULT_URL, api_key: ApiKey = None, wait: Wait = False,
    timeout: Timeout = 600.0, as_json: AsJson = False,
) -> None:
    """Show an evaluation side by side: per case, the baseline's and the candidate's
    pass/fail and answers, what differs, the failed checks; totals per side.

    Exit status 0 when it passed (or still runs, without --wait); 1 when it finished
    with a case the candidate failed, or --wait timed out; 2 on bad input or an error."""
    with sdk_client(url, api_key, timeout=10) as client:
        found = client.evaluations.get(agent_id, evaluation_id)
        _finish(client, url, agent_id, found, wait=wait, timeout=timeout, as_json=as_json)


@evaluations_app.command("start")
def start(
    agent_id: Annotated[str, typer.Argument(help="The agent (agt_…).")],
    test_set: Annotated[str, typer.Option("--test-set", help="The test set (tset_…).")],
    url: Url = DEFAULT_URL, api_key: ApiKey = None,
    candidate_version: Annotated[int | None, typer.Option(
        "--candidate-version", min=1, help="The version to evaluate.")] = None,
    candidate_model: Annotated[str | None, typer.Option(
        "--candidate-model", help="Run the candidate with this model in place of its "
                                  "own.")] = None,
    baseline_version: Annotated[int | None, typer.Option(
        "--baseline-version", min=1, help="Default: the agent's live version.")] = None,
    wait: Wait = False, timeout: Timeout = 600.0, as_json: AsJson = False,
) -> None:
    """Start an evaluation: every case of the test set on the baseline and the candidate
    (a version, a model, or both). Prints its id; with --wait, the finished evaluation.

    Exit status 0 once started (or, with --wait, when it passed); 1 with --wait when a
    case failed on the candidate or it timed out; 2 on bad input or an error."""
    if candidate_version is None and candidate_model is None:
        fail("the candidate needs --candidate-version, --candidate-model or both")
    with sdk_client(url, api_key, timeout=30) as client:
        started = client.evaluations.start(
            agent_id, test_set, candidate_version=candidate_version,
            candidate_model=candidate_model, baseline_version=baseline_version)
        if not wait:
            if as_json:
                _show(started, as_json=True)
            else:
                typer.echo(started.evaluation_id)
            return
        _finish(client, url, agent_id, started, wait=True, timeout=timeout, as_json=as_json)


@agents_app.command("promote")
def promote(
    agent_id: Annotated[str, typer.Argument(help="The agent (agt_…).")],
    version: Annotated[int, typer.Argument(min=1, help="The version to make live.")],
    evaluation: Annotated[str | None, typer.Option(
        "--evaluation", help="Promote only if this evaluation of exactly this version "
                             "passed every case.")] = None,
    url: Url = DEFAULT_URL, api_key: ApiKey = None,
) -> None:
    """Make a version the live one (what a run without a version runs).

    Exit status 0 once promoted; 1 when the platform refused it (the evaluation is of
    another version, still running, or a case failed); 2 on bad input or an error."""
    from tenantry.client import Conflict

    with sdk_client(url, api_key, timeout=10) as client:
        try:
            done = client.agents.promote(agent_id, version, evaluation_id=evaluation)
        except Conflict as exc:
            typer.secho(f"refused: {exc.detail}", fg="red", err=True)
            raise typer.Exit(1) from None
    evidence = f" on evaluation {done.evaluation_id}" if done.evaluation_id else ""
    typer.echo(f"{done.agent_id} v{done.version} is live (was v{done.previous_version})"
               f"{evidence}")
