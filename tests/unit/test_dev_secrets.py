"""The data dir's own secrets when several processes start on it at once (a worker fleet,
`tenantry worker --processes N`): every process must end up with the same token and key."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

from tenantry.bootstrap.secrets import master_key, operator_token
from tenantry.config import Settings

PROCESSES = 12


def _both(data_dir: str, barrier: multiprocessing.synchronize.Barrier,
          out: multiprocessing.Queue[tuple[str, str]]) -> None:
    settings = Settings(data_dir=Path(data_dir))
    barrier.wait()  # all at once, so each finds the files missing
    key = master_key(settings, create=True)
    assert key is not None
    out.put((operator_token(settings), key.encoded()))


def test_processes_starting_together_share_one_token_and_one_key(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(PROCESSES)
    out: multiprocessing.Queue[tuple[str, str]] = ctx.Queue()
    procs = [ctx.Process(target=_both, args=(str(tmp_path), barrier, out))
             for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    got = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert len(set(got)) == 1
    token, key = got[0]
    assert (tmp_path / "operator_token").read_text() == token
    assert (tmp_path / "master_key").read_text() == key
    # Nothing half-written left behind, and the secrets are the owner's alone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["master_key", "operator_token"]
    for name in ("master_key", "operator_token"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600


def test_a_kept_token_is_read_back_not_replaced(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    first = operator_token(settings)
    assert operator_token(settings) == first
    assert first.startswith("op_")
