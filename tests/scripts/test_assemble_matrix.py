"""scripts/assemble_matrix.py: the rules on small journals, and the published measured matrices rebuilt byte
for byte by the commands their provenance pages give."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.scripts.conftest import ROOT, load_script

am = load_script("assemble_matrix")
MEASURED = ROOT / "matrices" / "measured"
HEADER = {
    "probe_journal": 1,
    "run_id": "r1",
    "started_at": "2026-01-02T03:04:05+00:00",
    "host": "box",
    "device": {"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0", "total_gib": 79.6474609375},
}


def _row(cid: str, outcome: str = "ok", **kw: object) -> dict[str, object]:
    kind = cid.split("/")[0]
    return {"id": cid, "kind": kind, "outcome": outcome, "params": kw.pop("params", {}), **kw}


def _journal(path: Path, *rows: dict[str, object], header: dict[str, object] = HEADER) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in (header, *rows))
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _assemble(tmp_path: Path, *argv: str) -> dict:
    out = tmp_path / "m.json"
    assert am.main([*argv, "-o", str(out)]) == 0
    return json.loads(out.read_text())


def test_later_journals_win_and_cells_keep_their_first_position(tmp_path: Path):
    a = _journal(tmp_path / "a.jsonl", _row("moe/x"), _row("moe/y", "crashed"), _row("moe/y", "timeout"))
    assert [(c["id"], c["outcome"]) for c in _assemble(tmp_path, str(a))["cells"]] == [
        ("moe/x", "ok"), ("moe/y", "crashed")
    ]  # fmt: skip
    b = _journal(tmp_path / "b.jsonl.gz", _row("moe/y"), _row("attention/z", "unsupported"))
    m = _assemble(tmp_path, str(a), str(b), "--planned", "4")
    assert [(c["id"], c["outcome"]) for c in m["cells"]] == [
        ("moe/x", "ok"), ("moe/y", "ok"), ("attention/z", "unsupported")
    ]  # fmt: skip
    assert m["run"] == {"status": "partial", "cells_planned": 4, "infra_error": None}
    prov = m["provenance"]
    assert prov["host"] == "box" and prov["created_at"] == "2026-01-02T03:04:05Z"
    assert prov["gpu"]["sm"] == 90 and prov["gpu"]["memory_gib"] == 79.6


NOTE = "{count[first]} old, {count[second]} new, {cells}/{planned}; missing {missing_count}: {missing}"


def test_drop_keep_detail_label_plan_and_note(tmp_path: Path):
    old = _journal(
        tmp_path / "old.jsonl",
        _row("moe/a", "crashed", root_cause="WARNING 11-22 04:20:39 [x.py:10] boom"),
        _row("attention/b", params={"fa_version": 2}),
        _row("engine/c"),
    )
    new = _journal(tmp_path / "new.jsonl", _row("moe/a", "oom"), _row("engine/c", "unsupported"))
    plan = tmp_path / "plan.json.gz"
    plan.write_bytes(
        gzip.compress(json.dumps([{"id": i} for i in ("engine/c", "moe/a", "attention/b", "moe/d")]).encode())
    )
    m = _assemble(
        tmp_path,
        f"first={old}",
        f"second={new}",
        "--plan", str(plan),
        "--drop", "second:outcome=oom",
        "--drop", "first:kind=attention&params.fa_version=2",
        "--keep", "second:kind=engine",
        "--detail", "old.jsonl:origin=x",
        "--label-detail", "round",
        "--strip-log-prefixes",
        "--created-at", "2026-01-01T00:00:00Z",
        "--provenance", '{"gpu": {"count": 1}, "versions": {"vllm": "0.26.0"}}',
        "--note", NOTE,
    )  # fmt: skip
    cells = {c["id"]: c for c in m["cells"]}
    assert list(cells) == ["engine/c", "moe/a"]
    assert cells["engine/c"]["outcome"] == "unsupported" and cells["engine/c"]["details"] == {
        "round": "second"
    }
    assert cells["moe/a"]["outcome"] == "crashed" and cells["moe/a"]["root_cause"] == "boom"
    assert cells["moe/a"]["details"] == {"origin": "x", "round": "first"}
    prov = m["provenance"]
    assert prov["note"] == "1 old, 1 new, 2/4; missing 2: attention/b, moe/d"
    assert prov["gpu"]["count"] == 1 and prov["versions"]["vllm"] == "0.26.0"
    assert m["run"]["cells_planned"] == 4


def test_supersede_keeps_the_older_outcome(tmp_path: Path):
    first = _journal(tmp_path / "first.jsonl", _row("moe/a", "timeout"), _row("moe/b"))
    older = tmp_path / "older.json"
    assert am.main([str(first), "-o", str(older), "--created-at", "2026-01-01T00:00:00Z"]) == 0
    second = _journal(tmp_path / "second.jsonl", _row("moe/a"))
    m = _assemble(tmp_path, str(second), "--supersede", str(older), "--created-at", "2026-01-02T00:00:00Z")
    cells = {c["id"]: c for c in m["cells"]}
    assert cells["moe/a"]["outcome"] == "ok"
    assert cells["moe/a"]["details"]["superseded"] == [
        {"run": "2026-01-01T00:00:00Z", "outcome": "timeout", "root_cause": None}
    ]
    assert "moe/b" in cells and m["provenance"]["note"].startswith("union of 2 runs")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--drop", "nocolon"], "SELECTOR"),
        (["--keep", "x:kind"], "FIELD=VALUE"),
        (["--detail", "x:novalue"], "KEY=VALUE"),
        (["--note", "{nope}"], "--note"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv, message):
    j = _journal(tmp_path / "j.jsonl", _row("moe/a"))
    assert am.main([str(j), "-o", str(tmp_path / "m.json"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_journal_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert am.main([str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "m.json")]) == 2
    assert "no such journal" in capsys.readouterr().err


def rebuild_commands(page: Path) -> str:
    """The ```bash block under the page's '## Rebuild' heading."""
    text = page.read_text(encoding="utf-8")
    found = re.search(r"^## Rebuild\n.*?```bash\n(.*?)```", text, re.S | re.M)
    assert found, f"{page.name}: no '## Rebuild' section with a bash block"
    return found.group(1)


PUBLISHED = sorted(p.name.removesuffix(".provenance.md") for p in MEASURED.glob("*.provenance.md"))


@pytest.mark.slow
@pytest.mark.parametrize("stem", PUBLISHED)
def test_published_matrix_is_rebuilt_byte_for_byte(tmp_path: Path, stem: str):
    published = MEASURED / f"{stem}.json"
    script = rebuild_commands(MEASURED / f"{stem}.provenance.md")
    target = f"-o matrices/measured/{stem}.json"
    assert target in script, f"the rebuild block must write {published.name}"
    script = script.replace(target, f"-o {tmp_path / published.name}")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / published.name).read_bytes() == published.read_bytes()


@pytest.mark.parametrize("stem", ["nvidia-h100-sm90-vllm-0.26.0", "nvidia-h200-sm90-vllm-0.26.0"])
def test_the_docs_carry_the_same_rebuild_commands(stem: str):
    assert rebuild_commands(MEASURED / f"{stem}.provenance.md") in (ROOT / "docs" / "publish.md").read_text(
        encoding="utf-8"
    )


def test_a_matrix_stands_in_for_a_lost_journal(tmp_path: Path):
    a = _journal(tmp_path / "a.jsonl", _row("engine/x", "device_fault", root_cause="illegal memory access"))
    first = _assemble(tmp_path, str(a))
    kept = tmp_path / "kept.json.gz"
    kept.write_bytes(gzip.compress(json.dumps(first).encode()))
    b = _journal(tmp_path / "b.jsonl", _row("engine/y"))
    m = _assemble(tmp_path, str(b), f"lost={kept}")
    assert [(c["id"], c["outcome"]) for c in m["cells"]] == [("engine/y", "ok"), ("engine/x", "device_fault")]
    assert m["cells"][1]["root_cause"] == "illegal memory access"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "cells": [{"id": "engine/z"}]}))
    with pytest.raises(am.BadInputError, match="not a result row"):
        am.read_journal(bad)
