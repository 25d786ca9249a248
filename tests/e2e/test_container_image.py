"""The container image builds from this checkout and runs a cell: deploy/container/build-image
(the Debian base and the locked wheels cached under ~/.cache/tenantry/container, so only the
first build pays for them), then the services of deploy/container/compose.yaml — Postgres,
object storage, the migrations, the API and a worker — with the commands, users and
variables that file gives them, as plain `podman run`s in one pod (each service's host name
is the pod's loopback, as compose's network resolves it). An operator creates a tenant and
its key, the tenant an agent, and a run of the built-in scripted model finishes after the
worker ran the model's Python in its sandbox (gVisor, the image's default); the API says it
is live (`/healthz`) and ready (`/readyz`).

Why not podman-compose: Debian's 1.0.3 ignores `depends_on` conditions (a worker would start
before the migrations end); the pod runs the same file's services in that order.

podman, buildah, runc and debootstrap come from scripts/system-packages.txt, which `make
test` installs: without them this test fails, it is never skipped. The podman settings this
machine needs (runc: crun refuses hybrid cgroups; cgroupfs; no default ulimits; the
overlay driver, its store in the cache) are in `_podman_env`, not in the image or compose file."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from tenantry.client import Client
from tests.support.api import free_port

# A cold build (debootstrap, the wheels, the image) takes minutes; cached, seconds.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "deploy" / "container"
COMPOSE = CONTAINER / "compose.yaml"
CACHE = Path(os.environ.get("TENANTRY_CONTAINER_CACHE")
             or Path.home() / ".cache" / "tenantry" / "container")
TAG = "localhost/tenantry:e2e"
#: The services in the order their dependencies allow, and the one that runs to its end.
ORDER = ("db", "s3", "migrate", "api", "worker")
#: Generous: a start is seconds, a cold build minutes (debootstrap, then the wheels).
BUILD_WITHIN_S = 1800
READY_WITHIN_S = 180


def _podman_env() -> dict[str, str]:
    CACHE.mkdir(parents=True, exist_ok=True)
    conf, storage = CACHE / "containers.conf", CACHE / "storage.conf"
    conf.write_text('[containers]\ndefault_ulimits = []\nlog_driver = "k8s-file"\n'
                    '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
                    'events_logger = "file"\n')
    storage.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{CACHE / "storage"}"\n'
                       'runroot = "/run/tenantry-containers"\n')
    return {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage),
            "TENANTRY_CONTAINER_CACHE": str(CACHE)}


def _podman(env: dict[str, str], *args: str, check: bool = True,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check:
        assert done.returncode == 0, f"podman {' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def podman_env() -> dict[str, str]:
    for program, package in (("podman", "podman"), ("buildah", "buildah"),
                             ("runc", "runc"), ("debootstrap", "debootstrap")):
        assert shutil.which(program), (
            f"no {program}: apt-get install {package} (scripts/system-packages.txt; "
            "`make test` installs it as root)")
    env = _podman_env()
    started = time.monotonic()
    done = subprocess.run([str(CONTAINER / "build-image"), TAG], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=BUILD_WITHIN_S)
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    print(f"image built in {time.monotonic() - started:.1f}s")
    return env


_VAR = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def _interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}` in a value."""
    if isinstance(value, str):
        def one(m: re.Match[str]) -> str:
            name, kind, rest = m.groups()
            if variables.get(name):
                return variables[name]
            assert kind != "?", f"compose.yaml needs {name}: {rest}"
            return rest if kind == "-" else ""
        return _VAR.sub(one, value)
    if isinstance(value, list):
        return [_interpolate(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v, variables) for k, v in value.items()}
    return value


def _run_args(pod: str, name: str, service: dict[str, Any], image: str, *,
              detach: bool = True) -> list[str]:
    """`podman run` arguments for one compose service, in the pod."""
    args = ["run", "--pod", pod, "--name", f"{pod}-{name}", *(["-d"] if detach else [])]
    if "user" in service:
        args += ["--user", service["user"]]
    if service.get("privileged"):
        args.append("--privileged")
    if service.get("read_only"):
        args.append("--read-only")
    for path in service.get("tmpfs", []):
        args += ["--tmpfs", path]
    for key, value in (service.get("environment") or {}).items():
        args += ["-e", f"{key}={value}"]
    for volume in service.get("volumes", []):
        source, target = volume.split(":", 1)
        args += ["-v", f"{pod}-{source}:{target}"]
    if "entrypoint" in service:
        args += ["--entrypoint", service["entrypoint"][0]]
        command = [*service["entrypoint"][1:], *service.get("command", [])]
    else:
        command = list(service.get("command", []))
    assert service["image"] == image
    return [*args, image, *command]


def _until(what: str, check: Any, env: dict[str, str], pod: str) -> None:
    deadline = time.monotonic() + READY_WITHIN_S
    while not check():
        if time.monotonic() > deadline:
            logs = "\n".join(
                f"--- {c}\n" + _podman(env, "logs", "--tail", "30", c, check=False).stderr
                for c in _podman(env, "ps", "-a", "--pod", "--filter", f"pod={pod}",
                                 "--format", "{{.Names}}").stdout.split())
            pytest.fail(f"{what} not ready after {READY_WITHIN_S}s\n{logs}")
        time.sleep(0.5)


def _healthy(url: str) -> bool:
    try:
        return httpx2.get(url, timeout=5).status_code == 200
    except httpx2.HTTPError:
        return False


@pytest.fixture
def cell(podman_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """The compose file's services in one pod: the API's base URL and the operator token."""
    env, pod, port = podman_env, f"tenantry-e2e-{uuid.uuid4().hex[:8]}", free_port()
    variables = {name: secrets.token_urlsafe(18) for name in (
        "TENANTRY_OWNER_PASSWORD", "TENANTRY_LOGIN_PASSWORD",
        "TENANTRY_CONSOLE_LOGIN_PASSWORD", "TENANTRY_S3_ACCESS_KEY_ID",
        "TENANTRY_S3_SECRET_ACCESS_KEY")}
    variables |= {"TENANTRY_OPERATOR_TOKEN": f"op_{secrets.token_urlsafe(24)}",
                  "TENANTRY_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
                  "TENANTRY_IMAGE": TAG}
    compose = _interpolate(yaml.safe_load(COMPOSE.read_text()), variables)
    services = compose["services"]
    assert set(services) == set(ORDER)
    hosts = [f"--add-host={name}:127.0.0.1" for name in ORDER]
    started = time.monotonic()
    _podman(env, "pod", "create", "--name", pod, "-p", f"127.0.0.1:{port}:8080", *hosts)
    try:
        for name in ("db", "s3"):
            _podman(env, *_run_args(pod, name, services[name], TAG))
        health = {name: services[name]["healthcheck"]["test"][1:] for name in ("db", "s3")}
        for name, test in health.items():
            _until(name, lambda n=name, t=test: _podman(
                env, "exec", f"{pod}-{n}", *t, check=False).returncode == 0, env, pod)
        migrated = _podman(env, *_run_args(pod, "migrate", services["migrate"], TAG,
                                                  detach=False),
                           check=False)
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        for name in ("api", "worker"):
            _podman(env, *_run_args(pod, name, services[name], TAG))
        base_url = f"http://127.0.0.1:{port}"
        _until("the API", lambda: _healthy(f"{base_url}/readyz"), env, pod)
        print(f"cell up in {time.monotonic() - started:.1f}s")
        yield base_url, variables["TENANTRY_OPERATOR_TOKEN"]
    finally:
        _podman(env, "pod", "rm", "-f", "-t", "5", pod, check=False)
        for volume in ("db", "s3"):
            _podman(env, "volume", "rm", "-f", f"{pod}-{volume}", check=False)


def test_the_image_runs_a_cell_that_finishes_a_run(cell: tuple[str, str]) -> None:
    base_url, operator_token = cell
    op = {"Authorization": f"Bearer {operator_token}"}
    tenant = httpx2.post(f"{base_url}/admin/v1/tenants", headers=op, timeout=30,
                        json={"name": "Acme", "tenant_id": "acme"})
    assert tenant.status_code == 201, tenant.text
    key = httpx2.post(f"{base_url}/admin/v1/tenants/acme/api-keys", headers=op, timeout=30)
    assert key.status_code == 201, key.text
    # The run has the worker execute model-written code: in the worker container's gVisor
    # sandbox, the image's default backend.
    script = [{"tool_calls": [{"name": "run_python", "arguments": {"code": "print(6 * 7)"}}]},
              {"text": "Got: {last_tool_result}"}]
    with Client(base_url, api_key=key.json()["api_key"]) as client:
        agent = client.agents.create("coder", model="scripted", system_prompt="Answer briefly.",
                                     tools=["run_python"])
        started = client.runs.create(agent.agent_id, {"input": "six times seven",
                                                      "script": script})
        run = client.runs.wait(started.run_id, timeout=120)
    assert run.status == "finished", run
    assert run.answer is not None and run.answer.startswith("Got: "), run.answer
    result = json.loads(run.answer.removeprefix("Got: "))
    assert (result["exit_code"], result["stdout"]) == (0, "42\n"), result
    for probe, status in (("healthz", "ok"), ("readyz", "ready")):
        answer = httpx2.get(f"{base_url}/{probe}", timeout=10)
        assert (answer.status_code, answer.json()) == (200, {"status": status}), answer.text
