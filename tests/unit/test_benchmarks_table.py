"""docs/BENCHMARKS.md's first table is what benchmarks/results/ says: a result committed
without its table, or a figure typed into the table by hand, fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_current_figures_table_is_generated_from_the_results() -> None:
    checked = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "table.py"), "--check"],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_a_table_edited_by_hand_is_found(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8")
    edited = doc.replace("| met |", "| missed |", 1)
    assert edited != doc
    copy = tmp_path / "benchmarks"
    copy.mkdir()
    (copy / "table.py").write_text((ROOT / "benchmarks" / "table.py").read_text())
    (copy / "results").symlink_to(ROOT / "benchmarks" / "results")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "BENCHMARKS.md").write_text(edited, encoding="utf-8")
    checked = subprocess.run([sys.executable, str(copy / "table.py"), "--check"],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 1
    assert "benchmarks/table.py --write" in checked.stderr
