"""One field report as a value (:class:`Report`), built from a checked JSON object (:func:`report_from_dict`).

The fields are the file's (docs/reports.md); the checks a report passes are :mod:`probe.reports.rules`,
its version range :mod:`probe.reports.ranges`, the base and its queries :mod:`probe.reports.base`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from probe.reports import vocab
from probe.reports.vocab import FIELDS

PACKAGED = "probe/data/reports.json"


@dataclass(frozen=True)
class Workaround:
    flags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class Report:
    """One field report (the fields of the file; docs/reports.md)."""

    id: str
    date: str
    seen_in: str
    gpus: tuple[int, ...]
    kind: str
    backend: str
    outcome: str
    symptom: str
    root_cause: str
    checked: str
    source: str | None = None
    also: tuple[str, ...] = ()
    citation: str | None = None
    gpu_names: tuple[str, ...] = ()
    fa_version: int | None = None
    quant: str | None = None
    features: dict[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] = ()
    model_specific: bool = False
    versions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    versions_text: str | None = None
    introduced_in: dict[str, str] = field(default_factory=dict)
    fixed_in: dict[str, str] = field(default_factory=dict)
    last_affected: dict[str, str] = field(default_factory=dict)  # the last release known affected (OSV)
    open_as_of: str | None = None
    workaround: Workaround | None = None
    works_with: tuple[str, ...] = ()
    log_line: str | None = None
    phase: str | None = None
    exit_code: int | None = None
    shape: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    origin: str = PACKAGED  # the file it was read from

    @property
    def is_open(self) -> bool:
        """A failure nobody has reported fixed."""
        return self.outcome != "ok" and not self.fixed_in

    @property
    def failed(self) -> bool:
        """A failure that rules the backend out (not ``ok``, not ``degraded``)."""
        return self.outcome not in ("ok", "degraded")

    @property
    def speaks_for_vllm(self) -> bool:
        """Whether this report is evidence about vLLM's own stack: any report seen in vLLM or in a
        package vLLM runs as is; from another stack only a shared kernel's behaviour (wrong output,
        a fault, a hang, a slowdown), not its build or gate (no kernel image, import, JIT, refusal)."""
        return self.seen_in in vocab.SHARES_BINARIES_WITH_VLLM or self.outcome not in vocab.BUILD_OUTCOMES

    @property
    def where(self) -> str:
        """The report's address, else its citation."""
        return self.source or self.citation or self.id

    @property
    def backend_parts(self) -> tuple[str, ...]:
        return tuple(self.backend.split("+"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, in the file's field order, without empty optional fields."""
        d: dict[str, Any] = {}
        for name in FIELDS:
            v = getattr(self, name)
            if name == "workaround" and v is not None:
                v = {"flags": list(v.flags), "env": dict(v.env), **({"note": v.note} if v.note else {})}
            elif isinstance(v, tuple):
                v = list(v)
            elif name == "versions":
                v = {k: list(x) for k, x in v.items()}
            empty = v is None or v is False or v == [] or v == {}
            if empty and name not in ("source", "also", "features", "models", "versions"):
                continue
            d[name] = v
        return d


def report_from_dict(d: Mapping[str, Any], origin: str = PACKAGED) -> Report:
    """A checked report object (see :func:`probe.reports.rules.report_problems`) as a value."""
    w = d.get("workaround")
    kw: dict[str, Any] = {k: d[k] for k in FIELDS if k in d and d[k] is not None}
    for key in ("also", "gpus", "gpu_names", "models", "works_with"):
        kw[key] = tuple(d.get(key) or ())
    kw["versions"] = {k: tuple(v) for k, v in (d.get("versions") or {}).items()}
    kw["introduced_in"] = dict(d.get("introduced_in") or {})
    kw["fixed_in"] = dict(d.get("fixed_in") or {})
    kw["last_affected"] = dict(d.get("last_affected") or {})
    kw["workaround"] = (
        Workaround(tuple(w.get("flags") or ()), dict(w.get("env") or {}), w.get("note")) if w else None
    )
    return Report(**kw, origin=origin)
