"""probe.run.run_plan, the library entry point of ``probe run``: what the report says, resume, typed errors,
and a stop by SIGTERM that still writes what was measured."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from probe.cells import CellResult, CellSpec
from probe.errors import UsageError
from probe.run import RunInterrupted, RunOptions, run_plan
from tests.sandbox.conftest import M


def _cells(*targets: str) -> tuple[CellSpec, ...]:
    return tuple(
        CellSpec.model_validate({"id": f"c{i}-{t}", "kind": "fixture", "target": M + t, "timeout_s": 60})
        for i, t in enumerate(targets)
    )


def test_report_says_what_ran_and_where_it_went(tmp_path: Path):
    seen: list[tuple[str, int, int]] = []
    opts = RunOptions(
        cells=_cells("ok", "raise_unsupported"),
        journal=tmp_path / "j.jsonl",
        output=tmp_path / "m.json",
        progress=lambda r, n, total: seen.append((r.id, n, total)),
    )
    report = run_plan(opts)
    assert report.planned == 2 and not report.not_run and not report.interrupted
    assert (
        sorted(r.id for r in report.ran)
        == sorted(r.id for r in report.results)
        == ["c0-ok", "c1-raise_unsupported"]
    )
    assert report.tally == {"ok": 1, "unsupported": 1}
    assert report.journal == tmp_path / "j.jsonl" and report.matrix == tmp_path / "m.json"
    assert sorted(n for _, n, _ in seen) == [1, 2] and {t for _, _, t in seen} == {2}
    matrix = json.loads((tmp_path / "m.json").read_text())
    assert matrix["run"]["status"] == "complete" and len(matrix["cells"]) == 2
    assert matrix["provenance"]["note"] == report.note and report.run_id in report.note

    again = run_plan(RunOptions(cells=opts.cells, journal=opts.journal, resume=True))
    assert again.ran == () and len(again.results) == 2 and again.matrix is None


def test_typed_errors(tmp_path: Path):
    with pytest.raises(UsageError, match="empty"):
        run_plan(RunOptions(cells=()))
    journal = tmp_path / "j.jsonl"
    run_plan(RunOptions(cells=_cells("ok"), journal=journal))
    with pytest.raises(UsageError, match="already exists"):
        run_plan(RunOptions(cells=_cells("ok"), journal=journal))


@pytest.mark.slow
def test_sigterm_stops_the_run_and_keeps_what_was_measured(tmp_path: Path):
    first = threading.Event()

    def progress(r: CellResult, n: int, total: int) -> None:
        first.set()

    def stop() -> None:
        if first.wait(60):
            threading.Event().wait(1.0)  # the hang cell is running by now
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    killer = threading.Thread(target=stop, daemon=True)
    killer.start()
    opts = RunOptions(cells=_cells("ok", "hang"), journal=tmp_path / "j.jsonl", output=tmp_path / "m.json",
                      jobs=2, progress=progress)  # fmt: skip
    with pytest.raises(RunInterrupted) as stopped:
        run_plan(opts)
    killer.join(5)
    report = stopped.value.report
    assert report.interrupted and [r.id for r in report.results] == ["c0-ok"]
    assert report.not_run == {"c1-hang": "interrupted"} and report.note.endswith("; interrupted")
    assert json.loads((tmp_path / "m.json").read_text())["run"]["status"] == "partial"
    assert signal.getsignal(signal.SIGTERM) == before
