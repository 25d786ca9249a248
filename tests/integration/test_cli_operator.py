"""The operator's CLI against a real API: onboarding a tenant without curl (`tenants`,
`api-keys --tenant`, `secrets --tenant`, `tool-servers --tenant`, `prices`), and reading
and deciding another tenant's run and approval with the operator token alone (`runs show|
tail|trace --tenant`, `approvals --tenant`, `approvals inbox`). Output into a pipe is TSV,
`--json` is the API's JSON, an error answer is one line and exit status 2."""

from __future__ import annotations

import json

from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.cli import cli
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes


def _tsv(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.splitlines()]


def _fields(out: str) -> dict[str, str]:
    header, *rows = _tsv(out)
    assert header == ["field", "value"]
    return {row[0]: row[1] for row in rows}


async def test_operator_onboards_a_tenant_from_the_cli(api: Api) -> None:
    op = {"TENANTRY_URL": api.base_url, "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN}
    code, out, err = await cli("tenants", "create", "Acme Ltd", "--id", "acme-cli", env=op)
    assert code == 0, err
    created = _fields(out)
    assert (created["tenant_id"], created["name"]) == ("acme-cli", "Acme Ltd")
    assert created["webhook_secret"] and "shown this once" in err
    code, out, err = await cli("tenants", "list", env=op)
    assert code == 0, err
    header, *rows = _tsv(out)
    assert header[:3] == ["tenant_id", "name", "region"]
    assert ["acme-cli", "Acme Ltd", "default"] in [row[:3] for row in rows]
    code, out, _ = await cli("tenants", "show", "acme-cli", "--json", env=op)
    assert code == 0 and json.loads(out)["tenant_id"] == "acme-cli"
    code, out, err = await cli("tenants", "show", "no-such-tenant", env=op)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "404" in err, err
    # Its policy and retention, read as the operator: a field/value table, or the JSON.
    for group in ("policy", "retention"):
        code, out, err = await cli("tenants", group, "show", "acme-cli", env=op)
        assert code == 0 and _fields(out), (group, err)
        code, out, err = await cli("tenants", group, "show", "acme-cli", "--json", env=op)
        assert code == 0 and isinstance(json.loads(out), dict), (group, err)
        code, out, err = await cli("tenants", group, "show", "no-such-tenant", env=op)
        assert (code, out) == (2, "") and err.startswith("error: 404"), (group, err)
        assert err.count("\n") == 1
    code, out, err = await cli("tenants", "tombstones", "acme-cli", env=op)
    assert code == 0 and _tsv(out) == [["run_id", "kind", "agent_id", "status", "reason",
                                        "deleted (UTC)"]], err
    code, out, err = await cli("tenants", "tombstones", "no-such-tenant", env=op)
    assert (code, out) == (2, "") and err.startswith("error: 404"), err
    code, out, err = await cli("tenants", "pause", "acme-cli", env=op)
    assert code == 0 and _fields(out)["paused"] == "yes", err
    code, out, err = await cli("tenants", "resume", "acme-cli", env=op)
    assert code == 0 and _fields(out)["paused"] == "no", err

    # Its first key: printed alone on stdout, and it works as the tenant's.
    code, out, err = await cli("api-keys", "create", "--tenant", "acme-cli", "--name", "ci",
                               env=op)
    assert code == 0, err
    key = out.strip()
    tenant = {"TENANTRY_URL": api.base_url, "TENANTRY_API_KEY": key}
    code, out, err = await cli("runs", "list", env=tenant)
    assert code == 0, err
    code, out, err = await cli("api-keys", "list", "--tenant", "acme-cli", "--json", env=op)
    assert code == 0, err
    [made] = json.loads(out)
    assert made["name"] == "ci" and made["created_by"] == "operator"
    code, out, err = await cli("secrets", "put", "crm-token", "--tenant", "acme-cli",
                               env=op, stdin="s3cret\n")
    assert (code, out.strip()) == (0, "stored secret crm-token"), err
    code, out, err = await cli("secrets", "list", "--tenant", "acme-cli", env=op)
    assert code == 0 and [row[0] for row in _tsv(out)] == ["name", "crm-token"], err
    # The tenant sees what the operator did for it.
    code, out, err = await cli("secrets", "list", env=tenant)
    assert code == 0 and "crm-token" in out, err
    code, out, err = await cli("tool-servers", "list", "--tenant", "acme-cli", env=op)
    assert code == 0 and _tsv(out)[0][0] == "name" and len(_tsv(out)) == 1, err
    code, out, err = await cli("api-keys", "revoke", made["key_id"], "--tenant", "acme-cli",
                               env=op)
    assert code == 0 and made["key_id"] in out, err
    code, _, err = await cli("runs", "list", env=tenant)
    assert code == 2 and "401" in err

    # An unknown tenant is one line and exit status 2 in every group --tenant switches.
    for args in (("api-keys", "list"), ("secrets", "list"), ("tool-servers", "list"),
                 ("model-accounts", "list"), ("approvals", "list")):
        code, out, err = await cli(*args, "--tenant", "no-such-tenant", env=op)
        assert (code, out) == (2, ""), (args, out, err)
        assert err.startswith("error: 404") and err.count("\n") == 1, (args, err)
    code, out, err = await cli("tenants", "rotate-webhook-secret", "acme-cli", env=op)
    assert code == 0 and out.startswith("whsec_") and out.count("\n") == 1, err
    assert out.strip() != created["webhook_secret"]
    # Erasing asks first; --yes does not, and prints the erase job.
    code, out, err = await cli("tenants", "erase", "acme-cli", env=op, stdin="n\n")
    assert code == 1 and out.strip() == "" and "Erase tenant acme-cli" in err
    code, out, err = await cli("secrets", "list", "--tenant", "acme-cli", env=op)
    assert code == 0 and "crm-token" in out, err
    code, out, err = await cli("tenants", "erase", "acme-cli", "--yes", env=op)
    assert code == 0, err
    job = _fields(out)
    assert job["tenant_id"] == "acme-cli" and job["job_id"] and job["secrets_deleted"] == "1"
    code, out, err = await cli("tenants", "erase-status", job["job_id"], "--json", env=op)
    assert code == 0 and json.loads(out)["job_id"] == job["job_id"], err
    code, out, err = await cli("tenants", "erase-status", "no-such-job", env=op)
    assert (code, out) == (2, "") and err.startswith("error: 404") and err.count("\n") == 1
    # --tenant acts as the operator: without the token it is refused before any request.
    code, _, err = await cli("secrets", "list", "--tenant", "acme-cli",
                             env={"TENANTRY_URL": api.base_url})
    assert code == 2 and "operator token" in err
    code, _, err = await cli("tenants", "list", env={"TENANTRY_URL": api.base_url})
    assert code == 2 and "operator token" in err


async def test_operator_sets_and_lists_prices(api: Api) -> None:
    op = {"TENANTRY_URL": api.base_url, "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN}
    code, out, err = await cli("prices", "set", "acme/model-1", "--input", "1.5",
                               "--cached-input", "0.15", "--output", "6", env=op)
    assert code == 0, err
    set_ = _fields(out)
    assert (set_["model"], set_["input_per_m"], set_["output_per_m"]) == (
        "acme/model-1", "1500000", "6000000")
    code, out, err = await cli("prices", "list", env=op)
    assert code == 0, err
    header, *rows = _tsv(out)
    assert header[:2] == ["model", "source"]
    row = next(r for r in rows if r[0] == "acme/model-1")
    assert row[1] == "operator" and row[5] == "1.500000" and row[8] == "6.000000"
    code, out, err = await cli("prices", "show", "acme/model-1", "--json", env=op)
    assert code == 0 and [v["input_per_m"] for v in json.loads(out)] == [1_500_000], err
    code, out, err = await cli("prices", "set", "sandbox", "--per-second", "0.0001", env=op)
    assert code == 0 and _fields(out)["per_second_micros"] == "100", err
    code, out, err = await cli("prices", "set", "acme/model-1", "--input", "1", env=op)
    assert code == 2 and out == "" and "--cached-input" in err


async def test_operator_reads_and_decides_another_tenants_run(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant()
    other, _ = await api.tenant("Other")
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], needs_approval=["effect"])
    run_id = await api.start(h, agent, scripted(call("effect", note="refund"), answer("ok")))

    async def pending() -> bool:
        r = await api.client.get("/v1/approvals", params={"status": "pending"}, headers=h)
        return bool(r.json()["data"])

    await until(pending, "the run asks for approval", 30)
    approval = (await api.client.get("/v1/approvals", headers=h)).json()["data"][0]
    approval_id = approval["approval_id"]
    op = {"TENANTRY_URL": api.base_url, "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN}

    code, out, err = await cli("approvals", "inbox", env=op)
    assert code == 0, err
    header, *rows = _tsv(out)
    assert header[:2] == ["tenant", "approval_id"]
    assert [tenant, approval_id, run_id, "effect"] in [row[:4] for row in rows]
    code, out, err = await cli("approvals", "list", "--tenant", tenant, env=op)
    assert code == 0 and [row[:3] for row in _tsv(out)[1:]] == [
        [approval_id, run_id, "effect"]], err
    # Every field the API answers, with no list of them in the command.
    code, out, err = await cli("approvals", "show", approval_id, "--tenant", tenant, env=op)
    assert code == 0, err
    shown = _fields(out)
    assert list(shown) == list(approval)
    assert shown["arguments"] == json.dumps(approval["arguments"], separators=(",", ":"))
    code, out, err = await cli("approvals", "show", approval_id, "--tenant", other, env=op)
    assert code == 2 and out == "" and "404" in err
    code, out, err = await cli("approvals", "approve", approval_id, "--tenant", tenant,
                               "--comment", "checked by support", env=op)
    assert code == 0 and f"{approval_id} approved" in out, err
    code, _, err = await cli("approvals", "deny", approval_id, "--tenant", tenant, env=op)
    assert code == 1 and err.startswith("refused:")

    # The run goes on; the operator follows it to its end, then reads it and its trace.
    code, out, err = await cli("runs", "tail", run_id, "--tenant", tenant, env=op)
    assert code == 0, err
    lines = out.splitlines()
    assert "RunCreated" in lines[0] and "RunFinished" in lines[-1]
    assert any("ApprovalDecided" in line and "checked by support" in line for line in lines)
    code, out, err = await cli("runs", "show", run_id, "--tenant", tenant, env=op)
    assert code == 0 and _fields(out)["status"] == "finished", err
    code, out, err = await cli("runs", "trace", run_id, "--tenant", tenant, env=op)
    assert code == 0, err
    header, *rows = _tsv(out)
    assert header == ["seq", "kind", "start s", "ms", "what", "detail"]
    kinds = [row[1] for row in rows]
    assert {"queue", "model", "approval", "tool"} <= set(kinds), kinds
    assert f"{run_id} ({agent} v1) finished" in err  # the totals, on stderr in a pipe
    code, out, err = await cli("runs", "trace", run_id, "--tenant", tenant, "--json", env=op)
    assert code == 0, err
    as_tenant = (await api.client.get(f"/v1/runs/{run_id}/trace", headers=h)).json()
    assert json.loads(out) == as_tenant
    # The tenant's own key reads the same trace.
    code, out, err = await cli("runs", "trace", run_id, "--json", env={
        "TENANTRY_URL": api.base_url, "TENANTRY_API_KEY": h["Authorization"][7:]})
    assert code == 0 and json.loads(out) == as_tenant, err
    # Another tenant's id finds no such run; an unknown tenant says so: one line each.
    for who, says in ((other, "run"), ("no-such-tenant", "tenant")):
        for command in ("show", "trace", "tail"):
            code, out, err = await cli("runs", command, run_id, "--tenant", who, env=op)
            assert (code, out) == (2, ""), (who, command, out)
            assert err.startswith("error: 404") and err.count("\n") == 1, (who, command, err)
            assert says in err.lower(), err


async def test_operator_run_routes_answer_problems_and_refuse_a_tenant_key(api: Api) -> None:
    tenant, h = await api.tenant()
    paths = [f"/admin/v1/tenants/{{}}/runs/{run}{tail}"
             for run, tail in (("run_nope", ""), ("run_nope", "/trace"), ("run_nope", "/events"))]
    paths += ["/admin/v1/tenants/{}/approvals", "/admin/v1/tenants/{}/approvals/apr_nope"]
    for path in paths:
        for who in (tenant, "no-such-tenant"):
            r = await api.client.get(path.format(who), headers={
                **api.operator, "Accept": "application/json"})
            assert r.status_code == (200 if path.endswith("/approvals") and who == tenant
                                     else 404), (path, who, r.text)
            if r.status_code == 404:
                assert r.headers["content-type"] == "application/problem+json"
        r = await api.client.get(path.format(tenant), headers=h)
        assert r.status_code == 401, (path, r.text)
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/approvals/apr_nope/decision",
                              headers=api.operator, json={"decision": "maybe"})
    assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"
