"""The 5-minute tour (docs/tour.md, the README's next step), run as written: its Python
blocks saved, in order, as `tour.py` (as the tour says), and its shell blocks, in order, in
one bash with `set -euo pipefail` — one of them runs `tour.py` — against `tenantry up` on a
fresh data dir and the MCP test server. Only the ports, the data dir and the `.venv/bin/`
prefix are this test's own. A command of the tour that fails, or prints something other
than what the tour says it prints at the points checked below, fails this test: the tour
stays true of the code (the client SDK's included)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.api import free_port
from tests.support.up_process import BIN, start_up, stop_up, up_env

pytestmark = pytest.mark.e2e
TOUR = Path(__file__).resolve().parents[2] / "docs" / "tour.md"
API_REFERENCE = TOUR.parent / "reference" / "api.md"


def _ours(text: str, *, port: int, mcp_port: int) -> str:
    return (text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
            .replace("127.0.0.1:9100", f"127.0.0.1:{mcp_port}")
            .replace(".venv/bin/", f"{BIN}/"))


def _tour(readme: str) -> str:
    return readme[readme.index("# A 5-minute tour"):readme.index("## Status")]


def tour_program(readme: str, *, port: int, mcp_port: int) -> str:
    """The tour's ```python blocks, in order: `tour.py`."""
    blocks = re.findall(r"```python\n(.*?)```", _tour(readme), flags=re.S)
    assert len(blocks) >= 7, f"the tour has {len(blocks)} Python blocks"
    return _ours("\n".join(blocks), port=port, mcp_port=mcp_port)


def _sh(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def tour_script(readme: str, *, port: int, mcp_port: int, curl: str | None = None) -> str:
    """The tour's ```sh blocks as one script. The first block starts the platform and the
    tool server in terminals 1 and 2 (this test starts them) and exports terminal 3's
    variables: only its `export` lines are kept. With ``curl`` (the API reference), its
    "tour with curl" replaces the tour's Python steps: the operator's steps 1 and 2, then
    those blocks."""
    blocks = _sh(_tour(readme))
    assert len(blocks) >= 5, f"the tour has {len(blocks)} shell blocks"
    first = "\n".join(line for line in blocks[0].splitlines() if line.startswith("export"))
    parts = [first, *blocks[1:]]
    if curl is not None:
        section = curl[curl.index("## The tour with curl"):]
        section = section[:section.index("\n## ")]
        setup, *steps = _sh(section)
        assert len(steps) == 7, f"the curl tour has {len(steps)} steps"
        parts = [first, blocks[1], blocks[2] + setup, *steps]
    script = "\n".join(f"echo '=== step {i}'\n{part}" for i, part in enumerate(parts))
    return _ours(script, port=port, mcp_port=mcp_port)


@contextmanager
def platform(tmp_path: Path) -> Iterator[tuple[dict[str, str], int, int]]:
    """`tenantry up` on a fresh data dir and the MCP test server, as terminals 1 and 2 of
    the tour start them: the environment, the API's port and the tool server's."""
    port, mcp_port = free_port(), free_port()
    tools = subprocess.Popen([sys.executable, "-m", "tenantry.testing.mcp_server",
                              "--port", str(mcp_port)], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    env = up_env(tmp_path / "data", port, "unused")
    del env["TENANTRY_OPERATOR_TOKEN"]  # as a user starts it: up makes one and keeps it
    proc = None
    try:
        assert tools.stdout is not None and tools.stdout.readline().startswith("READY")
        proc = start_up(env, tmp_path / "up.log", demo=False)
        yield {**env, "HOME": str(tmp_path)}, port, mcp_port
    finally:
        if proc is not None:
            stop_up(proc, tmp_path / "up.log")
        tools.terminate()
        tools.communicate(timeout=30)


def run_steps(script: str, env: dict[str, str], cwd: Path) -> dict[str, str]:
    """The script in one bash with `set -euo pipefail`: each step's output."""
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=180)
    out = done.stdout
    assert done.returncode == 0, f"{out[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    return dict(re.findall(r"=== step (\d+)\n(.*?)(?==== step |\Z)", out, flags=re.S))


def test_the_readme_tour_runs_as_written_on_a_fresh_data_dir(tmp_path: Path) -> None:
    with platform(tmp_path) as (env, port, mcp_port):
        readme = TOUR.read_text()
        (tmp_path / "tour.py").write_text(tour_program(readme, port=port, mcp_port=mcp_port))
        steps = run_steps(tour_script(readme, port=port, mcp_port=mcp_port), env, tmp_path)
        # 1: the key is exported for the SDK; 3: `tour.py`, steps 3 to 9 of the tour.
        program = steps["3"]
        assert re.search(r"^3\. agt_[0-9a-f]{32} version 1$", program, flags=re.M), program
        # 4: the run waits on its approval (never a race with a sleep)...
        assert re.search(r"^4\. run_[0-9a-f]{32} waiting$", program, flags=re.M), program
        # 5: ...shows the exact arguments and the call's key, and finishes once approved.
        assert re.search(r"^5\. effect \{'note': 'refund order 42'\} run_[0-9a-f]{32}:2:0$",
                         program, flags=re.M), program
        assert "5. approved\n5. finished\n" in program
        # 6: the stream ends after RunFinished, with the tool's result in it.
        six = [line for line in program.splitlines() if line.startswith("6. ")]
        assert re.findall(r"^6\. Event\(seq=(\d+),", program, flags=re.M) == [
            str(n) for n in range(1, 8)], six
        assert "type='RunFinished'" in six[-1]
        assert "type='ToolCompleted'" in six[4] and "applied refund order 42" in six[4]
        # 7: the answer; the retry is the same run; one effect; another body conflicts.
        assert "7. finished 'Done: applied refund order 42' Usage(" in program
        assert "7. True finished\n" in program
        assert "7. duplicate effects: 0\n" in program
        assert "7. 409 conflict: This Idempotency-Key was already used" in program
        # 8: the cancel lands while the model thinks (its reply saved) and the run ends
        # cancelled — or, as the tour says, in the moment before the model was asked.
        # "running" is all a client can wait for, so which one is the machine's pace.
        assert ("8. True\n8. ['RunCreated', 'CancelRequested', 'ModelReplied', "
                "'RunCancelled']\n") in program or (
            "8. True\n8. ['RunCreated', 'CancelRequested', 'RunCancelled']\n") in program
        # 9: resumed after seq 3; JSON pages end with the run's end.
        assert "9. [4, 5, 6, 7]\n9. 7 7 True\n" in program
        # 10: the replay of both runs finds no difference.
        assert "2 run(s) replayed, 0 with differences" in steps["4"]
        # The tour writes no file where it is run but the program it tells you to write.
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
            "tour.py", "up.log"]


def test_the_api_references_curl_tour_runs_as_written(tmp_path: Path) -> None:
    with platform(tmp_path) as (env, port, mcp_port):
        script = tour_script(TOUR.read_text(), port=port, mcp_port=mcp_port,
                             curl=API_REFERENCE.read_text())
        steps = run_steps(script, env, tmp_path)
        # 4: the run waits on its approval (never a race with a sleep)...
        assert steps["4"].strip().endswith("waiting"), steps["4"]
        # 5: ...and finishes once approved.
        assert '"status":"approved"' in steps["5"] and steps["5"].strip().endswith("finished")
        # 6: the stream ends after RunFinished with the tool's result in it.
        assert "event: RunFinished" in steps["6"] and "applied refund order 42" in steps["6"]
        # 7: the answer; the retry is the same run; one effect, no duplicate.
        assert '"answer":"Done: applied refund order 42"' in steps["7"]
        assert '"duplicate_effects":0' in steps["7"]
        # 8: the cancel lands while the model thinks and the run ends cancelled.
        assert '"cancel_requested":true' in steps["8"]
        assert steps["8"].strip().splitlines()[-1] == "event: RunCancelled", steps["8"]
        # 9: JSON pages end with the run's end.
        assert '"run_ended":true' in steps["9"]
        assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["up.log"]
