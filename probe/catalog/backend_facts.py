"""The parts of the backend catalog beside the scan rules: vLLM's facts of one backend, vLLM's own
spellings (flags, removed environment variables, auto-selection order), the components a backend runs
on, and the names probe does not cover. Records are assembled in :mod:`probe.catalog.backends`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from probe.catalog.fields import Fields, need
from probe.catalog.quants import QUANTS

PLATFORMS = ("cuda", "rocm")


def _env_table(raw: Any, where: str) -> dict[str, str]:
    need(isinstance(raw, dict), f"{where}: expected an object")
    for k, v in raw.items():
        need(isinstance(k, str) and k.startswith("VLLM_") and isinstance(v, str), f"{where}: VLLM_* -> text")
    return dict(raw)


@dataclass(frozen=True)
class VllmFacts:
    """What vLLM says of one backend (``None`` since: the catalog does not know the first release)."""

    since: str | None = None
    until: str | None = None  # the last release that accepts the value
    quants: tuple[str, ...] = ()  # MoE: the quant formats vLLM has kernels of for it
    min_sm: dict[str, int] = field(default_factory=dict)  # quant -> lowest compute capability
    platform: str = "cuda"
    last_resort: bool = False  # vLLM falls back to it only when nothing else works
    expert_parallel_only: bool = False
    env_era: dict[str, dict[str, str]] = field(default_factory=dict)  # quant -> env before --moe-backend
    fa_flag_since: str | None = None  # FLASH_ATTN: the release whose flag first selects this FA version
    select: str | None = None  # how to pick it, in words
    note: str | None = None

    @property
    def single_gpu_cuda(self) -> bool:
        """A backend one NVIDIA GPU can use (not ROCm-only, not an expert-parallel megakernel)."""
        return self.platform == "cuda" and not self.expert_parallel_only


_FACTS = (
    "since", "until", "quants", "min_sm", "platform", "last_resort", "expert_parallel_only", "env_era",
    "fa_flag_since", "select", "note",
)  # fmt: skip


def parse_facts(raw: Any, where: str, kind: str) -> VllmFacts:
    f = Fields(raw, where, _FACTS)
    min_sm = f.mapping("min_sm")
    need(all(q in QUANTS and type(v) is int for q, v in min_sm.items()), f"{where}.min_sm: quant -> integer")
    era = f.mapping("env_era")
    need(all(q in QUANTS for q in era), f"{where}.env_era: keys are quants")
    facts = VllmFacts(
        since=f.version("since"),
        until=f.version("until"),
        quants=f.texts("quants", QUANTS),
        min_sm=min_sm,
        platform=f.choice("platform", PLATFORMS, "cuda"),
        last_resort=f.flag("last_resort"),
        expert_parallel_only=f.flag("expert_parallel_only"),
        env_era={q: _env_table(t, f"{where}.env_era.{q}") for q, t in era.items()},
        fa_flag_since=f.version("fa_flag_since"),
        select=f.text("select", None),
        note=f.text("note", None),
    )
    need(
        kind != "moe" or (facts.since is not None and bool(facts.quants)),
        f"{where}: a MoE backend needs since and quants",
    )
    need(kind != "all2all" or facts.since is not None, f"{where}: an all2all backend needs since")
    return facts


@dataclass(frozen=True)
class FlagSpec:
    since: str
    args: tuple[str, ...]  # ``{value}`` stands for the backend / version
    alt: str | None = None

    @classmethod
    def parse(cls, raw: Any, where: str) -> FlagSpec:
        f = Fields(raw, where, ("since", "args", "alt"), required=("since", "args"))
        args = f.texts("args")
        need(len(args) >= 2, f"{where}.args: a flag and its value")
        return cls(f.version("since") or "", args, f.text("alt", None))


@dataclass(frozen=True)
class EnvSpec:
    since: str | None
    until: str | None
    replacement: str | None

    @classmethod
    def parse(cls, raw: Any, where: str) -> EnvSpec:
        f = Fields(raw, where, ("since", "until", "replacement"))
        return cls(f.version("since"), f.version("until"), f.text("replacement", None))


@dataclass(frozen=True)
class VllmSpelling:
    """vLLM's own spellings across releases (the ``vllm`` section)."""

    moe_backend_flag: FlagSpec
    attention_backend_flag: FlagSpec
    fa_version_flag: FlagSpec
    env: dict[str, EnvSpec]  # the environment switches vLLM read, and until when
    latest_known: str
    auto_priority: dict[str, Any]  # vLLM's auto-selection order (ties only)

    @classmethod
    def parse(cls, raw: Any, where: str) -> VllmSpelling:
        keys = (
            "moe_backend_flag",
            "attention_backend_flag",
            "fa_version_flag",
            "env",
            "latest_known",
            "auto_priority",
        )
        f = Fields(raw, where, keys, required=keys)
        return cls(
            FlagSpec.parse(f.raw["moe_backend_flag"], f.at("moe_backend_flag")),
            FlagSpec.parse(f.raw["attention_backend_flag"], f.at("attention_backend_flag")),
            FlagSpec.parse(f.raw["fa_version_flag"], f.at("fa_version_flag")),
            {k: EnvSpec.parse(v, f.at(f"env.{k}")) for k, v in f.mapping("env").items()},
            f.version("latest_known") or "",
            f.mapping("auto_priority"),
        )


@dataclass(frozen=True)
class Components:
    """The installed distributions grouped into components (fnmatch patterns, pip names in lower case,
    ``-`` for ``_`` and ``.``): a cell's result depends on the digests of the components it runs on."""

    groups: dict[str, tuple[str, ...]]
    always: tuple[str, ...]  # every cell runs on these
    cells: dict[str, tuple[str, ...] | None]  # cell kinds with no backend (None: every component)
    imports: dict[str, dict[str, str]]  # component -> {install, module, provenance}

    @classmethod
    def parse(cls, raw: Any, where: str) -> Components:
        f = Fields(raw, where, ("groups", "always", "cells", "imports"), required=("groups", "always"))
        groups = {
            k: Fields({"v": v}, f.at(f"groups.{k}"), ("v",)).texts("v")
            for k, v in f.mapping("groups").items()
        }
        cells: dict[str, tuple[str, ...] | None] = {}
        for k, v in f.mapping("cells").items():
            cells[k] = None if v == "*" else Fields({"v": v}, f.at(f"cells.{k}"), ("v",)).texts("v")
        imports = {}
        for k, v in f.mapping("imports").items():
            spec = Fields(
                v,
                f.at(f"imports.{k}"),
                ("install", "module", "provenance"),
                ("install", "module", "provenance"),
            )
            imports[k] = {n: spec.text(n) for n in ("install", "module", "provenance")}
        comp = cls(groups, f.texts("always"), cells, imports)
        named = {*comp.always, *comp.imports, *(c for v in cells.values() for c in v or ())}
        need(named <= set(groups), f"{where}: components used but not defined: {sorted(named - set(groups))}")
        return comp


@dataclass(frozen=True)
class NotCovered:
    """A name (or a regex of names) vLLM lists that probe has no record of, and why."""

    kind: str
    reason: str
    name: str | None = None
    match: str | None = None
    family: str | None = None  # the coverage-table column of its field reports (default: other <kind>)

    def covers(self, backend: str) -> bool:
        if self.name is not None:
            return backend == self.name
        return bool(self.match and re.search(self.match, backend))

    @classmethod
    def parse(cls, raw: Any, where: str) -> NotCovered:
        f = Fields(raw, where, ("kind", "name", "match", "reason", "family"), required=("kind", "reason"))
        kind, reason = f.choice("kind", ("moe", "attention", "all2all")), f.text("reason")
        entry = cls(kind, reason, f.text("name", None), f.regex("match", None), f.text("family", None))
        need((entry.name is None) != (entry.match is None), f"{where}: a name or a match, one of them")
        return entry
