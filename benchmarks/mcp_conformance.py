"""mcp_conformance: the official MCP conformance suite's client scenarios with the platform as
the client — not a speed but a count, kept beside the other figures so the table says how
much of the spec the platform meets, measured, on which commit.

It runs ``tests/integration/test_mcp_client_conformance.py`` (every client scenario of the
2025-06-18 and 2025-11-25 specs in the pinned suite, each through the real gateway and
worker: tests/support/conformance_client.py) and counts its outcomes from pytest's JUnit
report: a scenario decided against (docs/decisions/0039-…) passes its test only by failing
the way its ADR says, so it is counted apart.

Progress on stderr; the last stdout line is one JSON object:
``{"suite", "scenarios", "passed", "decided_against", "failed", "failures", "extensions"}``
(the extension scenarios the platform implements, apart: not in the spec's count).

    .venv/bin/python benchmarks/mcp_conformance.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from _harness import console, emit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.integration.test_mcp_client_conformance import DECIDED_AGAINST  # noqa: E402
from tests.support.mcp_conformance import (  # noqa: E402
    EXTENSION_SCENARIOS,
    PACKAGE,
    VERSION,
)

TESTS = "tests/integration/test_mcp_client_conformance.py"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        console.log(f"running {TESTS}")
        subprocess.run([sys.executable, "-m", "pytest", TESTS, "-q", "-p", "no:cacheprovider",
                        f"--junitxml={report}", "-k", "test_client_scenario"],
                       cwd=ROOT, check=False, stdout=sys.stderr)
        cases = ElementTree.parse(report).getroot().iter("testcase")
        outcomes = {case.attrib["name"].partition("[")[2].rstrip("]"):
                    "failed" if case.find("failure") is not None or case.find("error")
                    is not None else "skipped" if case.find("skipped") is not None else "passed"
                    for case in cases}
    extensions = {s: outcomes.pop(s, "missing") for s in EXTENSION_SCENARIOS}
    failures = sorted(s for s, o in outcomes.items() if o != "passed")
    against = sorted(s for s, o in outcomes.items() if o == "passed" and s in DECIDED_AGAINST)
    emit({"suite": f"{PACKAGE}@{VERSION}", "scenarios": len(outcomes),
          "passed": sum(o == "passed" for o in outcomes.values()) - len(against),
          "decided_against": against, "failed": len(failures), "failures": failures,
          "extensions": extensions})


if __name__ == "__main__":
    main()
