"""The backend catalog (``probe/data/backends.json``): one record per vLLM MoE / attention / EP all2all
backend.

A record says everything probe knows of one backend (FLASH_ATTN: one record per FlashAttention
version), so adding a backend is one record (CONTRIBUTING.md):

- ``vllm`` — how vLLM spells and gates it: since which release the value exists (and until which),
  the quants it takes, the lowest GPU per quant, the platform, the environment switches of the
  releases before ``--moe-backend`` (``env_era``);
- ``runtime`` — the components it runs on beyond vLLM and torch (``components`` below), for
  ``probe run --reuse`` and the ``needs`` lines of ``recommend``;
- ``mode`` / ``warm`` — whether its first use compiles code, and what ``probe run``'s pre-pass warms;
- ``scan`` — which files and kernels must load for a GPU (:mod:`probe.catalog.scan_rules`), or
  ``scan_gap``: why there is no rule yet.

Names vLLM lists that probe does not cover are in ``not_covered``, each with its reason. The vLLM-wide
spellings (the flags, the removed environment variables, vLLM's auto-selection order) are the ``vllm``
section; :class:`Components` groups the installed distributions. Frozen dataclasses read by hand
(:mod:`probe.catalog.fields`): ``recommend`` reads this catalog on its start-up path.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from probe.catalog.backend_facts import Components, NotCovered, VllmFacts, VllmSpelling, parse_facts

__all__ = ["Backend", "BackendCatalog", "Components", "NotCovered", "VllmFacts", "catalog"]
from probe.catalog.fields import Fields, need
from probe.catalog.scan_rules import MODES, ScanRule, parse_scan_rule

FILE = "backends.json"
KINDS = ("moe", "attention", "all2all")
WARM = ("layout", "module")


@dataclass(frozen=True)
class Backend:
    id: str
    kind: str  # "moe" | "attention" | "all2all" (expert-parallel dispatch / combine, DP + EP only)
    name: str  # as vLLM spells it (--moe-backend value, AttentionBackendEnum member)
    label: str
    family: str  # the coverage-table column of its field reports
    vllm: VllmFacts
    runtime: tuple[str, ...] | None  # components beyond `always`; None: every component (unknown)
    fa_version: int | None = None
    mla: bool = False
    #: compiled (ships device code) / jit (compiled at first use) / pure-triton / python (CuTe DSL);
    #: None: not known
    mode: str | None = None
    #: what probe run's pre-pass warms before timing: its attention layout's first forward, or its module
    warm: str | None = None
    scan: ScanRule | None = None
    scan_gap: str | None = None  # why there is no scan rule

    @property
    def compiles_at_first_use(self) -> bool:
        return self.mode in ("jit", "pure-triton", "python")


_RECORD = (
    "id", "kind", "name", "label", "family", "fa_version", "mla", "mode", "warm", "vllm", "runtime",
    "scan", "scan_gap",
)  # fmt: skip


def _record(raw: Any, where: str) -> Backend:
    f = Fields(raw, where, _RECORD, required=("id", "kind", "name", "family", "vllm", "runtime"))
    kind = f.choice("kind", KINDS)
    rid = f.text("id")
    need(bool(re.match(rf"^{kind}\.[a-z0-9_.]+$", rid)), f"{where}.id: {rid!r} must be '{kind}.<name>'")
    runtime = f.raw["runtime"]
    need(runtime == "*" or isinstance(runtime, list), f"{where}.runtime: a list of components or '*'")
    mode = f.choice("mode", MODES, None)
    scan = parse_scan_rule(f.raw["scan"], f.at("scan"), mode) if f.has("scan") else None
    need(
        (scan is None) != (f.text("scan_gap", None) is None),
        f"{where}: a scan rule or a scan_gap, one of them",
    )
    fa = f.integer("fa_version", None)
    need(fa is None or fa in (2, 3, 4), f"{where}.fa_version: 2, 3 or 4")
    return Backend(
        id=rid,
        kind=kind,
        name=f.text("name"),
        label=f.text("label", f.text("name")),
        family=f.text("family"),
        vllm=parse_facts(f.raw["vllm"], f.at("vllm"), kind),
        runtime=None if runtime == "*" else f.texts("runtime"),
        fa_version=fa,
        mla=f.flag("mla"),
        mode=mode,
        warm=f.choice("warm", WARM, None),
        scan=scan,
        scan_gap=f.text("scan_gap", None),
    )


@dataclass(frozen=True)
class BackendCatalog:
    reference: dict[str, str]  # the releases the scan rules were checked against
    sources: dict[str, str]
    vllm: VllmSpelling
    components: Components
    backends: tuple[Backend, ...]
    not_covered: tuple[NotCovered, ...]

    def records(self, kind: str | None = None) -> list[Backend]:
        return [b for b in self.backends if kind is None or b.kind == kind]

    def find(self, kind: str, name: str, fa: Any = None) -> Backend | None:
        """The record of ``name`` (FLASH_ATTN: of FA version ``fa``; without one, its first record)."""
        found = [b for b in self.backends if b.kind == kind and b.name == name]
        if fa is not None:
            found = [b for b in found if b.fa_version == fa] or found
        return found[0] if found else None

    def names(self, kind: str) -> list[str]:
        """The distinct names of ``kind``'s records, in file order."""
        return list(dict.fromkeys(b.name for b in self.backends if b.kind == kind))

    def gap(self, kind: str, name: str) -> NotCovered | None:
        """The ``not_covered`` entry that covers ``name`` (None: a record has it, or nothing does)."""
        return next((n for n in self.not_covered if n.kind == kind and n.covers(name)), None)

    def scanned(self, names: list[str] | None = None) -> list[Backend]:
        """Records with a scan rule whose id, name or kind matches one of ``names`` (case-insensitive)."""
        ruled = [b for b in self.backends if b.scan is not None]
        if not names:
            return ruled
        wanted = {n.lower() for n in names}
        return [b for b in ruled if b.id.lower() in wanted or b.name.lower() in wanted or b.kind in wanted]

    def components_of(self, kind: str, backend: str, fa: Any = None) -> tuple[str, ...]:
        """The components a cell of ``kind`` for ``backend`` (+ FA version) runs on, ``always`` included
        (a backend without a record, and ``auto``, run on every component)."""
        c = self.components
        if kind in c.cells:
            found = c.cells[kind]
        else:
            rec = self.find(kind, backend, fa) if kind in KINDS else None
            found = rec.runtime if rec is not None else None
        return tuple(sorted(c.groups if found is None else {*c.always, *found}))

    def imports_of(self, kind: str, backend: str, fa: Any = None) -> list[dict[str, str]]:
        """What ``backend`` imports at run time that an image may lack: ``{install, module, provenance}``
        per component (a backend with no record, or one that runs on everything: nothing said)."""
        rec = self.find(kind, backend, fa) if kind in KINDS else None
        if rec is None or rec.runtime is None:
            return []
        return [
            dict(self.components.imports[c])
            for c in self.components_of(kind, backend, fa)
            if c in self.components.imports
        ]


def _check_references(cat: BackendCatalog) -> None:
    ids = [b.id for b in cat.backends]
    need(len(set(ids)) == len(ids), f"duplicate backend ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    groups = set(cat.components.groups)
    for b in cat.backends:
        unknown = sorted(set(b.runtime or ()) - groups)
        need(
            not unknown, f"backend {b.id}: runtime components {unknown} are not defined in components.groups"
        )
        covered = cat.gap(b.kind, b.name)
        need(
            covered is None,
            f"backend {b.id} has a record and a not_covered entry ({covered and covered.reason})",
        )
    for quant, order in cat.vllm.auto_priority.get("moe", {}).items():
        unknown = [n for n in order if cat.find("moe", n) is None]
        need(not unknown, f"vllm.auto_priority.moe.{quant}: no record for {unknown}")


def parse(raw: Any) -> BackendCatalog:
    """Build the catalog from the parsed JSON, raising ValueError on anything malformed."""
    top = ("schema_version", "about", "reference", "sources", "vllm", "components", "backends", "not_covered")
    f = Fields(raw, "backends.json", top, required=("schema_version", "vllm", "components", "backends"))
    need(f.raw["schema_version"] == 2, "backends.json: schema_version must be 2")
    cat = BackendCatalog(
        reference=f.mapping("reference"),
        sources=f.mapping("sources"),
        vllm=VllmSpelling.parse(f.raw["vllm"], "vllm"),
        components=Components.parse(f.raw["components"], "components"),
        backends=f.items("backends", _record, non_empty=True),
        not_covered=f.items("not_covered", NotCovered.parse),
    )
    _check_references(cat)
    return cat


@functools.cache
def catalog() -> BackendCatalog:
    """The packaged backend catalog, validated once per process."""
    from probe.catalog import datafiles
    from probe.errors import DataFileError

    try:
        return parse(datafiles.read_json(FILE))
    except ValueError as exc:
        raise DataFileError(f"packaged data file probe/data/{FILE} is invalid: {exc}") from exc


def attention_names() -> frozenset[str]:
    """Every attention name the catalog knows: records and the exact names of ``not_covered``."""
    cat = catalog()
    exact = {n.name for n in cat.not_covered if n.kind == "attention" and n.name}
    return frozenset(cat.names("attention")) | exact


def is_attention(name: str) -> bool:
    """Whether ``name`` is an attention backend (a record, a ``not_covered`` name or pattern)."""
    return name in attention_names() or catalog().gap("attention", name) is not None


def matching(kind: str, pattern: str) -> Iterator[Backend]:
    """Records of ``kind`` whose name matches the shell pattern (``flashinfer_*``)."""
    return (b for b in catalog().records(kind) if fnmatch.fnmatchcase(b.name, pattern))
