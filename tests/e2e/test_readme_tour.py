"""The README's 5-minute tour, run as written: its shell blocks, in order, in one bash with
`set -euo pipefail`, against `tenantry up` on a fresh data dir and the MCP test server —
only the ports, the data dir and the `.venv/bin/` prefix are this test's own. A command of
the tour that fails, or prints something other than what the tour says it prints at the
points checked below, fails this test: the tour stays true of the code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.api import free_port
from tests.support.up_process import BIN, start_up, stop_up, up_env

pytestmark = pytest.mark.e2e
README = Path(__file__).resolve().parents[2] / "README.md"


def tour_script(readme: str, *, port: int, mcp_port: int) -> str:
    """The tour's ```sh blocks as one script. The first block starts the platform and the
    tool server in terminals 1 and 2 (this test starts them) and exports terminal 3's
    variables: only its `export` lines are kept."""
    tour = readme[readme.index("## A 5-minute tour"):readme.index("## Status")]
    blocks = re.findall(r"```sh\n(.*?)```", tour, flags=re.S)
    assert len(blocks) >= 10, f"the tour has {len(blocks)} shell blocks"
    first = "\n".join(line for line in blocks[0].splitlines() if line.startswith("export"))
    parts = [first, *blocks[1:]]
    script = "\n".join(f"echo '=== step {i}'\n{part}" for i, part in enumerate(parts))
    return (script.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
            .replace("127.0.0.1:9100", f"127.0.0.1:{mcp_port}")
            .replace(".venv/bin/", f"{BIN}/"))


def test_the_readme_tour_runs_as_written_on_a_fresh_data_dir(tmp_path: Path) -> None:
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
        script = tour_script(README.read_text(), port=port, mcp_port=mcp_port)
        done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script],
                              env={**env, "HOME": str(tmp_path)}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=180)
        out = done.stdout
        assert done.returncode == 0, f"{out[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        steps = dict(re.findall(r"=== step (\d+)\n(.*?)(?==== step |\Z)", out, flags=re.S))
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
        # 9: JSON pages end with the run's end; 10: the replay finds no difference.
        assert '"run_ended":true' in steps["9"]
        assert "1 run(s) replayed, 0 with differences" in steps["10"]
        # The tour writes no file where it is run.
        assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["up.log"]
    finally:
        if proc is not None:
            stop_up(proc, tmp_path / "up.log")
        tools.terminate()
        tools.communicate(timeout=30)
