"""The field-report base: cited public reports of what broke (or worked) on which GPU, backend,
quant, feature and versions — read, checked and queried.

The packaged base is ``probe/data/reports.json`` (schema version 3); users add their own files
(``probe report add``) and pass them with ``--reports FILE`` or ``$PROBE_REPORTS`` (os.pathsep-
separated). Files are plain JSON checked by :mod:`probe.reports.rules` (no pydantic: ``probe
recommend`` reads them on its start-up path); :mod:`probe.reports.report_schema` is the pydantic
model of the same file, for the test suite, ``probe report add`` and the JSON Schema.

The functions callers use: :func:`load_reports` (packaged + extra files), :func:`reports_for` (what
applies to a GPU x backend x kind x quant x features at some versions) and :func:`workarounds_for`.
A report's version range: :mod:`probe.reports.ranges`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from probe.catalog import datafiles
from probe.catalog.names import model_key
from probe.errors import BadInputError, DataFileError
from probe.reports import vocab
from probe.reports.osv import from_osv, is_osv
from probe.reports.ranges import VersionStatus, version_status
from probe.reports.record import PACKAGED, Report, Workaround, report_from_dict

ENV = "PROBE_REPORTS"


def reports_from_document(doc: Any, origin: str) -> tuple[Report, ...]:
    """The reports of a parsed file, every entry checked (:mod:`probe.reports.rules`);
    ``ValueError`` listing the problems when it is not valid."""
    from probe.reports.rules import file_problems

    problems = file_problems(doc)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ValueError("; ".join(problems[:5]) + more)
    return tuple(report_from_dict(d, origin) for d in doc["reports"])


@functools.cache
def packaged_reports(gpus: frozenset[int] | None = None) -> tuple[Report, ...]:
    """The base shipped with probe (of the GPUs in ``gpus``; None: all). Read on ``recommend``'s
    start-up path as plain JSON with a header check only, as the other packaged data files there:
    every entry is checked by the test suite (tests/catalog/test_report_base.py), by
    :func:`check_packaged` (``probe reports``, ``probe gate``) and by the pydantic model
    (:func:`probe.reports.report_schema.validated`)."""
    doc = datafiles.read_json("reports.json")
    if (
        not isinstance(doc, dict)
        or doc.get("schema_version") != 3
        or not isinstance(doc.get("reports"), list)
    ):
        raise DataFileError(f"packaged data file {PACKAGED} is not a schema-3 report file")
    seen = [d for d in doc["reports"] if gpus is None or set(d.get("gpus") or ()) & gpus]
    return tuple(report_from_dict(d, PACKAGED) for d in seen)


@functools.cache
def check_packaged() -> None:
    """Every entry of the packaged base checked (once per process); ``DataFileError`` if one is not."""
    try:
        reports_from_document(datafiles.read_json("reports.json"), PACKAGED)
    except ValueError as exc:
        raise DataFileError(f"packaged data file {PACKAGED} is invalid: {exc}") from exc


def read_report_file(path: str | os.PathLike[str]) -> tuple[Report, ...]:
    """A user's report file (``probe report add`` writes them); :class:`BadInputError` when it is
    missing, not JSON or not valid."""
    from probe.userfile import MissingFileError, read_json

    p = Path(path)
    try:  # a regular file only, bounded in size and nesting
        doc = read_json(p, what="report file")
    except MissingFileError as exc:
        raise BadInputError(f"{p}: no such report file") from exc
    except BadInputError as exc:
        raise BadInputError(f"{p}: not a JSON report file ({exc})") from exc
    try:
        if is_osv(doc):  # an OSV export of probe's reports (``probe reports --format osv``)
            records = doc if isinstance(doc, list) else [doc]
            return tuple(from_osv(rec, str(p)) for rec in records)
        return reports_from_document(doc, str(p))
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInputError(f"{p}: invalid report file: {exc}") from exc


def env_report_files() -> list[Path]:
    """The files named by ``$PROBE_REPORTS`` (os.pathsep-separated)."""
    return [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]


def load_reports(
    files: Iterable[str | os.PathLike[str]] | None = None,
    gpus: Iterable[int] | None = None,
    *,
    check: bool = True,
) -> list[Report]:
    """The packaged base plus the extra files (default: ``$PROBE_REPORTS``, always checked); with
    ``gpus``, only the reports seen on one of those GPUs. ``check=False``: the packaged base with its
    header check only (``recommend``'s start-up path)."""
    only = frozenset(gpus) if gpus is not None else None
    extra = env_report_files() if files is None else [Path(f) for f in files]
    if check:
        check_packaged()
    out = list(packaged_reports(only))
    for f in extra:
        out.extend(r for r in read_report_file(f) if only is None or set(r.gpus) & only)
    return out


# ------------------------------------------------------------------ matching


def _bound_fits(bound: str, value: Any) -> bool:
    m = vocab.BOUND.match(bound)
    if m is None or isinstance(value, bool) or not isinstance(value, int):
        return False
    op, n = m.group(1), int(m.group(2))
    return {">": value > n, ">=": value >= n, "<": value < n, "<=": value <= n}[op]


def value_fits(wanted: Any, given: Any) -> bool:
    """A report's feature value against a set-up's (``fp8`` fits ``fp8_e4m3``; ``'>1'`` fits 2)."""
    if isinstance(wanted, str) and vocab.BOUND.match(wanted):
        return _bound_fits(wanted, given)
    if isinstance(wanted, str) and isinstance(given, str):
        w, g = wanted.lower(), given.lower()
        return w == g or g.startswith(w + "_") or w.startswith(g + "_")
    return bool(wanted == given) and type(wanted) is type(given)


def features_fit(wanted: Mapping[str, Any], given: Mapping[str, Any]) -> bool:
    """A report's features hold for a set-up: each model fact it names matches (unknown facts do
    not rule it out), each setting it needs is turned on (a setting not given is at vLLM's default),
    the reporter's set-up (TP, prefix caching, …) is not a condition — unless written as a bound
    (``tp: ">1"``: it needs tensor parallelism)."""
    for name, value in wanted.items():
        role = vocab.FEATURES[name][0]
        bound = isinstance(value, str) and vocab.BOUND.match(value) is not None
        if (role == "setup" and not (bound and name in given)) or (role == "model" and name not in given):
            continue
        have = given.get(name, vocab.SETTING_DEFAULTS.get(name))
        if not value_fits(value, have):
            return False
    return True


def _backend_fits(r: Report, backend: str | None) -> bool:
    if backend is None:
        return True
    b = backend.lower()
    return r.backend.lower() == b or b in (p.lower() for p in r.backend_parts)


def _kind_fits(r: Report, kind: str | None) -> bool:
    if kind is None or r.kind == kind:
        return True
    if r.kind != "engine" or kind not in ("moe", "attention"):
        return False
    return any(p in vocab.backends(kind) for p in r.backend_parts)


def matches(
    r: Report,
    *,
    gpu_sm: int | None = None,
    backend: str | None = None,
    kind: str | None = None,
    quant: str | None = None,
    features: Mapping[str, Any] | None = None,
    model: str | None = None,
) -> bool:
    """``r`` concerns this GPU / backend / kind / quant / set-up / model (None: any). A report's quant
    does not limit an attention report; a model-specific report needs its model."""
    if gpu_sm is not None and gpu_sm not in r.gpus:
        return False
    if not (_backend_fits(r, backend) and _kind_fits(r, kind)):
        return False
    if quant is not None and r.quant is not None and r.kind != "attention" and r.quant != quant:
        return False
    if features is not None and not features_fit(r.features, features):
        return False
    return not (model and r.model_specific and model_key(model) not in {model_key(m) for m in r.models})


def reports_for(
    gpu_sm: int | None,
    backend: str | None = None,
    kind: str | None = None,
    quant: str | None = None,
    features: Mapping[str, Any] | None = None,
    vllm_version: str | None = None,
    *,
    versions: Mapping[str, str | None] | None = None,
    model: str | None = None,
    reports: Sequence[Report] | None = None,
) -> list[tuple[Report, VersionStatus]]:
    """The reports that apply, each with its version status (only those whose status applies:
    inside the range, newer than seen while open, or versions unknown while open). ``versions``
    adds other packages' versions (``{"flashinfer": "0.6.7"}``) to ``vllm_version``; ``reports``
    defaults to :func:`load_reports`."""
    asked = {**(versions or {}), **({"vllm": vllm_version} if vllm_version else {})}
    pool = load_reports() if reports is None else reports
    out = []
    for r in pool:
        if matches(r, gpu_sm=gpu_sm, backend=backend, kind=kind, quant=quant, features=features, model=model):
            st = version_status(r, asked)
            if st.applies:
                out.append((r, st))
    return out


def workarounds_for(
    gpu_sm: int,
    backend: str,
    kind: str | None = None,
    quant: str | None = None,
    features: Mapping[str, Any] | None = None,
    vllm_version: str | None = None,
    **kw: Any,
) -> list[tuple[Report, Workaround]]:
    """The workarounds (flags / env) of the failure reports that apply to this backend."""
    found = reports_for(gpu_sm, backend, kind, quant, features, vllm_version, **kw)
    return [(r, r.workaround) for r, _ in found if r.workaround is not None and r.outcome != "ok"]


def provenance_versions(versions: Mapping[str, Any]) -> dict[str, str]:
    """A matrix provenance's ``versions`` as report packages (``torch_cuda`` -> ``cuda``)."""
    return {pkg: str(versions[key]) for key, pkg in vocab.PROVENANCE_PACKAGES.items() if versions.get(key)}
