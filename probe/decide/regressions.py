"""``probe gate``: decide whether the current image regressed against a baseline matrix.

Exit codes: 0 nothing regressed, 1 regression, 2 usage/config error, 3 nothing to compare,
4 probe infrastructure failed (current run recorded an infra failure, or too many cells missing),
6 a matrix file is invalid.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from probe.decide.compare import Comparison, compare, pattern_matches_any, require_arch
from probe.errors import EXIT_INFRA, EXIT_NOTHING_TO_COMPARE, EXIT_OK, EXIT_REGRESSION, OptionError
from probe.matrix.schema import Matrix
from probe.reports.base import load_reports, provenance_versions, reports_for
from probe.reports.record import Report


@dataclass
class Check:
    group: str  # cells / arch / recommendation / infra / reports
    name: str
    ok: bool
    message: str
    warning: bool = False  # passes, but worth a look (an open field report in the image's range)


@dataclass
class GateReport:
    exit_code: int
    verdict: str
    checks: list[Check] = field(default_factory=list)
    comparison: Comparison | None = None

    @property
    def regressions(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.ok and c.warning]

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "verdict": self.verdict,
            "regressions": [c.__dict__ for c in self.regressions],
            "checks": [c.__dict__ for c in self.checks],
            "comparison": self.comparison.to_dict() if self.comparison else None,
        }


def run_gate(
    baseline: Matrix,
    current: Matrix,
    *,
    models: list[str] | None = None,
    required: list[str] | None = None,
    slowdown: float = 0.10,
    max_missing: float = 0.5,
    reports: Sequence[Report] | None = None,
) -> GateReport:
    """``reports``: the field reports to warn from (default: the packaged base + ``$PROBE_REPORTS``)."""
    _validate_options(baseline, current, required, slowdown)
    early = _check_run_and_gpu(baseline, current) or _check_empty(baseline, current, required)
    if early is not None:
        return early
    cmp = compare(baseline, current, models=models)
    early = _check_coverage(cmp, required, max_missing)
    if early is not None:
        return early
    checks = _cell_checks(cmp)
    checks += _arch_checks(baseline, current, required)
    checks += _recommendation_checks(cmp, slowdown)
    checks += report_warnings(cmp, current, load_reports() if reports is None else reports)
    return _verdict(checks, cmp)


def _validate_options(baseline: Matrix, current: Matrix, required: list[str] | None, slowdown: float) -> None:
    """Reject a negative slowdown and malformed or unmatched ``--require-arch`` specs."""
    if slowdown < 0:
        raise OptionError("slowdown", "must be >= 0 (a fraction, e.g. 0.10 for 10 %)")
    for spec in required or []:
        _arch, _, pattern = spec.partition(":")
        if not pattern:
            raise OptionError("require_arch", f"{spec!r}: expected ARCH:PATTERN, e.g. sm_110a:*_moe_C*")
        if not pattern_matches_any(baseline, pattern) and not pattern_matches_any(current, pattern):
            raise OptionError(
                "require_arch",
                f"{spec!r}: no file or kernel in either matrix's static section matches {pattern!r}",
            )


def _check_run_and_gpu(baseline: Matrix, current: Matrix) -> GateReport | None:
    """Stop before comparing when the current run failed or the GPUs differ."""
    if current.run.status == "infra_failed":
        reason = current.run.infra_error or "infrastructure failure"
        check = Check("infra", "probe run", False, f"the current probe run failed: {reason}")
        return GateReport(EXIT_INFRA, "probe infrastructure failed", [check])
    bg, cg = baseline.provenance.gpu, current.provenance.gpu
    if bg and cg and bg.sm is not None and cg.sm is not None and bg.sm != cg.sm:
        check = Check(
            "infra",
            "gpu",
            False,
            f"the baseline was measured on sm_{bg.sm}, the current "
            f"matrix on sm_{cg.sm}: gate compares one GPU with itself",
        )
        return GateReport(EXIT_NOTHING_TO_COMPARE, "different GPUs: nothing to compare", [check])
    return None


def _check_empty(baseline: Matrix, current: Matrix, required: list[str] | None) -> GateReport | None:
    """A matrix with no cells is a valid, empty matrix: nothing to compare, unless the current run
    planned cells and recorded none (the prober failed: see the coverage check) or
    ``--require-arch`` has static sections to check."""
    if required:
        return None
    for side, m in (("baseline", baseline), ("current", current)):
        planned = m.run.cells_planned or 0
        if not len(m.cells) and not (side == "current" and planned > 0):
            check = Check("cells", "cells", True, f"the {side} matrix holds no cells")
            return GateReport(
                EXIT_NOTHING_TO_COMPARE, f"nothing to compare: the {side} matrix is empty", [check]
            )
    return None


def _check_coverage(cmp: Comparison, required: list[str] | None, max_missing: float) -> GateReport | None:
    """Stop when the current run measured too little, or when there is nothing to compare."""
    if cmp.baseline_cells and cmp.current_cells == 0 and not required:
        check = Check("infra", "cells", False, "the current matrix has no measured cells")
        return GateReport(EXIT_INFRA, "probe infrastructure failed", [check], cmp)
    if cmp.baseline_cells:
        missing = sum(1 for c in cmp.cells if c.new is None and c.old is not None)
        if missing / cmp.baseline_cells > max_missing:
            check = Check(
                "infra",
                "cells",
                False,
                f"{missing} of {cmp.baseline_cells} baseline cells are missing from the current "
                f"run (more than {max_missing:.0%}): the prober did not finish",
            )
            return GateReport(EXIT_INFRA, "probe infrastructure failed", [check], cmp)
    if cmp.common_cells == 0 and not required and not cmp.recommendations:
        return GateReport(EXIT_NOTHING_TO_COMPARE, "nothing to compare", [], cmp)
    return None


def _cell_checks(cmp: Comparison) -> list[Check]:
    """One failed check per regressed or vanished cell, or one passing summary check."""
    checks: list[Check] = []
    for ch in cmp.cells:
        if ch.regression:
            cause = f" ({ch.root_cause})" if ch.root_cause else ""
            checks.append(Check("cells", ch.id, False, f"{ch.id}: {ch.old} -> {ch.new}{cause}"))
        elif ch.old == "ok" and ch.new is None:
            checks.append(Check("cells", ch.id, False, f"{ch.id}: passed in the baseline, missing now"))
    if not checks:
        checks.append(
            Check("cells", "cells", True, f"{cmp.common_cells} common cells compared, none regressed")
        )
    unknown_now = [ch for ch in cmp.cells if ch.unknown_now and ch.old not in (None, ch.new)]
    if unknown_now:
        shown = "; ".join(f"{ch.id}: {ch.root_cause or ch.new}" for ch in unknown_now[:3])
        more = f" (+{len(unknown_now) - 3} more)" if len(unknown_now) > 3 else ""
        msg = (
            f"{len(unknown_now)} cell(s) not measured in the current run (unknown, no verdict): {shown}{more}"
        )
        checks.append(Check("cells", "unknown", True, msg))
    return checks


def _arch_checks(baseline: Matrix, current: Matrix, required: list[str] | None) -> list[Check]:
    """One check per ``--require-arch`` spec: is the arch still present in the current matrix?"""
    checks: list[Check] = []
    for spec in required or []:
        arch, hits = require_arch(current, spec)
        _, old_hits = require_arch(baseline, spec)
        if hits:
            checks.append(Check("arch", spec, True, f"{arch} present in {', '.join(hits)}"))
        else:
            lost = f" (the baseline had it in {', '.join(old_hits)})" if old_hits else ""
            checks.append(
                Check("arch", spec, False, f"required {arch} missing from {spec.partition(':')[2]}{lost}")
            )
    return checks


def _recommendation_checks(cmp: Comparison, slowdown: float) -> list[Check]:
    """One check per model recommendation: did it disappear or slow down past the threshold?"""
    checks: list[Check] = []
    unknown_now = sum(1 for ch in cmp.cells if ch.unknown_now)
    for rc in cmp.recommendations:
        old_pair, new_pair = rc.pair("old"), rc.pair("new")
        if old_pair and new_pair != old_pair and unknown_now:
            ok = True  # the baseline's evidence was not measured again (cells not run): unknown
            msg = (
                f"{rc.model}: {old_pair} -> {new_pair or 'none'} with {unknown_now} cell(s) not measured "
                "in the current run (unknown, no verdict)"
            )
        elif old_pair and not new_pair:
            ok = False
            msg = f"{rc.model}: the recommendation disappeared (was {old_pair}; no working pair now)"
        elif old_pair and new_pair and rc.slowdown is not None and rc.slowdown > slowdown:
            ok = False
            msg = (
                f"{rc.model}: best pair {new_pair} is {rc.slowdown:.0%} slower than the baseline's "
                f"{old_pair} (threshold {slowdown:.0%})"
            )
        else:
            ok = True
            extra = f", {rc.slowdown:+.1%} time" if rc.slowdown is not None else ""
            msg = f"{rc.model}: {old_pair or 'none'} -> {new_pair or 'none'}{extra}"
        checks.append(Check("recommendation", rc.model, ok, msg))
    return checks


def _pair_reports(
    rec: dict[str, Any], sm: int, versions: dict[str, str], pool: Sequence[Report]
) -> list[Any]:
    """(report, status) of the open field reports of a recommendation's backends on this GPU whose
    range the image's versions fall in."""
    from probe.recommend.recommender import model_profile
    from probe.recommend.report_match import request_features
    from probe.recommend.types import Request

    prof = model_profile(rec["model"], rec.get("quant"))
    feats = request_features(Request.of(prof, prof.quant, None, sm))
    pair = [
        ("moe", rec.get("moe_backend"), None),
        ("attention", rec.get("attention_backend"), rec.get("fa_version")),
    ]
    out = []
    for kind, backend, fa in pair:
        if not backend:
            continue
        for r, st in reports_for(
            sm, backend, kind, prof.quant, feats, versions=versions, model=prof.name, reports=pool
        ):
            if r.is_open and st.state in ("in_range", "newer_than_seen") and r.fa_version in (None, fa):
                out.append((r, st))
    return out


def report_warnings(cmp: Comparison, current: Matrix, pool: Sequence[Report]) -> list[Check]:
    """One warning per open field report whose version range holds the current image's versions, for
    the backends each gated model's recommendation uses (a warning never fails the gate)."""
    gpu = current.provenance.gpu
    if gpu is None or gpu.sm is None:
        return []
    versions = provenance_versions(current.provenance.versions.model_dump())
    checks = []
    for rc in cmp.recommendations:
        if not rc.new or not rc.new.get("attention_backend"):
            continue
        for r, st in _pair_reports(rc.new, gpu.sm, versions, pool):
            msg = (
                f"{rc.model}: {r.backend} {r.outcome} in an open field report ({st.note}): "
                f"{r.symptom} — {r.where}"
            )
            checks.append(Check("reports", f"{rc.model}: {r.id}", True, msg, warning=True))
    return checks


def _verdict(checks: list[Check], cmp: Comparison) -> GateReport:
    """Exit 1 with the number of failed checks, or 0."""
    failed = [c for c in checks if not c.ok]
    if failed:
        return GateReport(EXIT_REGRESSION, f"{len(failed)} regression(s)", checks, cmp)
    return GateReport(EXIT_OK, "no regression", checks, cmp)


def gate_markdown(rep: GateReport, baseline: Matrix, current: Matrix) -> str:
    icon = {0: "✅", 1: "❌", 3: "⚠️", 4: "🛑"}.get(rep.exit_code, "")

    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")

    lines = [
        f"## probe gate: {icon} {rep.verdict}",
        "",
        f"- baseline: `{esc(baseline.column_label())}` ({baseline.provenance.created_at})",
        f"- current: `{esc(current.column_label())}` ({current.provenance.created_at})",
        "",
    ]
    if rep.checks:
        lines += ["| check | result | detail |", "|---|---|---|"]
        for c in rep.checks:
            result = "ok" if c.ok else ("**FAILED**" if c.group == "infra" else "**REGRESSION**")
            result = "warning" if c.ok and c.warning else result
            lines.append(f"| {esc(c.group)}: {esc(c.name)} | {result} | {esc(c.message)} |")
    cmp = rep.comparison
    if cmp and cmp.versions:
        lines += [
            "",
            "Versions changed: " + ", ".join(f"{esc(k)} {o} → {n}" for k, (o, n) in cmp.versions.items()),
        ]
    if cmp and cmp.arches:
        lines += [
            "",
            "Arches changed: "
            + "; ".join(
                f"{esc(a.path)}{'::' + esc(a.kernel) if a.kernel else ''} +{a.gained} -{a.lost}"
                for a in cmp.arches
            ),
        ]
    return "\n".join(lines) + "\n"


def gate_junit(rep: GateReport) -> str:
    root = ET.Element("testsuites", name="probe gate")
    suite = ET.SubElement(
        root,
        "testsuite",
        name="probe gate",
        tests=str(len(rep.checks)),
        failures=str(len(rep.regressions)),
        errors="0",
        skipped="0",
    )
    for c in rep.checks:
        case = ET.SubElement(suite, "testcase", classname=f"probe.gate.{c.group}", name=c.name)
        if not c.ok:
            ET.SubElement(case, "failure", type=c.group, message=c.message).text = c.message
        elif c.warning:
            ET.SubElement(case, "system-out").text = f"warning: {c.message}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def github_annotations(rep: GateReport) -> list[str]:
    def esc(s: str) -> str:  # GitHub workflow-command escaping
        return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def esc_prop(s: str) -> str:
        return esc(s).replace(":", "%3A").replace(",", "%2C")

    def line(c: Check) -> str:
        level = "warning" if c.ok else "error"
        return f"::{level} title={esc_prop('probe gate: ' + c.group + ' ' + c.name)}::{esc(c.message)}"

    return [line(c) for c in [*rep.regressions, *rep.warnings]]
