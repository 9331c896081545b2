"""A backend's static-scan rule (the ``scan`` part of a record in ``probe/data/backends.json``).

Each backend with a rule has one or more *variants* (Marlin with bf16 vs fp16 activations, CUTLASS MoE
for NVFP4 vs FP8), each a list of *requirements*. A requirement names the files it needs (globs relative
to site-packages, alternatives tried in order — ``vllm/_moe_C_stable_libtorch.abi3.so`` from vLLM 0.24
on, ``vllm/_moe_C.abi3.so`` before) and, for compiled code, regexes over the kernel entry points those
files must hold. vLLM's run-time compute-capability gate is data too. How a requirement becomes a
verdict is :mod:`probe.arch.backend_rules`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from probe.catalog.fields import Fields, need

MODES = ("compiled", "jit", "pure-triton", "python")
CHECKS = ("code", "present", "jit", "pure-triton", "python")
_CC_RE = re.compile(r"^(\d{1,2})\.(\d)$")


def cc_to_int(cc: str) -> int:
    """'9.0' -> 90, '12.1' -> 121."""
    m = _CC_RE.match(cc)
    if not m:
        raise ValueError(f"not a compute capability: {cc!r} (expected e.g. '9.0' or '12.1')")
    return int(m.group(1)) * 10 + int(m.group(2))


@dataclass(frozen=True)
class GateClause:
    """All given fields must hold (AND). ``majors``: capability major in the list; ``exact``: this CC
    only; ``min`` / ``max``: inclusive bounds."""

    majors: tuple[int, ...] | None = None
    exact: str | None = None
    min: str | None = None
    max: str | None = None

    def allows(self, sm: int) -> bool:
        if self.majors is not None and sm // 10 not in self.majors:
            return False
        if self.exact is not None and sm != cc_to_int(self.exact):
            return False
        if self.min is not None and sm < cc_to_int(self.min):
            return False
        return not (self.max is not None and sm > cc_to_int(self.max))


@dataclass(frozen=True)
class Gate:
    """vLLM's run-time compute-capability gate: passes if any clause passes."""

    any_of: tuple[GateClause, ...]
    text: str  # the rule in words, as vLLM states it
    source: str  # file: function in the vLLM source

    def allows(self, sm: int) -> bool:
        return any(c.allows(sm) for c in self.any_of)


@dataclass(frozen=True)
class FileAlt:
    """One way a needed file can be present: ``glob`` matches the tail of a scanned path (or a member
    path inside a wheel); ``*`` does not cross ``/``. ``versions``: which releases ship this path."""

    glob: str
    versions: str | None = None


@dataclass(frozen=True)
class Requirement:
    what: str
    #: code: the kernels must exist as loadable device code; present: the file must exist (host-only
    #: module); jit: compiled at first use unless a prebuilt module is found; pure-triton / python:
    #: nothing compiled ahead of time
    check: str
    files: tuple[FileAlt, ...] = ()
    #: regexes (re.search) over demangled or mangled kernel names; several = alternatives the runtime
    #: dispatches between by arch (Marlin's 2-stage sm_75 vs 4-stage sm_80+ instances): the best counts
    kernels: tuple[str, ...] = ()
    #: all: every matching kernel/file must load (weakest wins); any: a menu the runtime picks from
    aggregate: str = "all"
    required: bool = True
    toolchain: str | None = None  # jit / pure-triton / python: what it needs at run time
    if_missing: str | None = None  # what happens at run time when no file is found
    expect: str | None = None  # observed in the reference release (for reviewers)

    @functools.cached_property
    def kernel_res(self) -> list[re.Pattern[str]]:
        """The kernel-name alternatives (empty: judge whole files)."""
        return [re.compile(rx) for rx in self.kernels]


@dataclass(frozen=True)
class Variant:
    name: str
    requirements: tuple[Requirement, ...]
    gate: Gate | None = None  # overrides the backend's gate for this variant
    note: str | None = None


@dataclass(frozen=True)
class ScanRule:
    gate: Gate
    variants: tuple[Variant, ...]  # the first one is the primary variant
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


def _cc(f: Fields, key: str) -> str | None:
    value = f.text(key, None)
    if value is not None:
        cc_to_int(value)
    return value


def _clause(raw: Any, where: str) -> GateClause:
    f = Fields(raw, where, ("majors", "exact", "min", "max"))
    majors = f.raw.get("majors")
    need(
        majors is None or (isinstance(majors, list) and all(type(m) is int for m in majors)),
        f"{where}.majors",
    )
    clause = GateClause(
        tuple(majors) if majors is not None else None, _cc(f, "exact"), _cc(f, "min"), _cc(f, "max")
    )
    need(clause != GateClause(), f"{where}: a gate clause needs at least one of majors / exact / min / max")
    return clause


def parse_gate(raw: Any, where: str) -> Gate:
    f = Fields(raw, where, ("any_of", "text", "source"), required=("any_of", "text", "source"))
    return Gate(f.items("any_of", _clause, non_empty=True), f.text("text"), f.text("source"))


def _file(raw: Any, where: str) -> FileAlt:
    f = Fields(raw, where, ("glob", "versions"), required=("glob",))
    glob = f.text("glob")
    need(not glob.startswith("/") and "**" not in glob, f"{where}: globs are relative and use single '*'")
    return FileAlt(glob, f.text("versions", None))


def _kernels(f: Fields) -> tuple[str, ...]:
    raw = f.raw.get("kernels")
    found = (raw,) if isinstance(raw, str) else tuple(raw or ())
    need(raw is None or bool(found), f"{f.at('kernels')}: an empty list of kernel regexes: use null")
    for rx in found:
        need(isinstance(rx, str), f"{f.at('kernels')}: expected regex text")
        try:
            re.compile(rx)
        except re.error as exc:
            raise ValueError(f"{f.at('kernels')}: bad kernel regex {rx!r}: {exc}") from None
    return found


_REQ_FIELDS = (
    "what",
    "check",
    "files",
    "kernels",
    "aggregate",
    "required",
    "toolchain",
    "if_missing",
    "expect",
)


def _requirement(raw: Any, where: str) -> Requirement:
    f = Fields(raw, where, _REQ_FIELDS, required=("what", "check"))
    req = Requirement(
        what=f.text("what"),
        check=f.choice("check", CHECKS),
        files=f.items("files", _file),
        kernels=_kernels(f),
        aggregate=f.choice("aggregate", ("all", "any"), "all"),
        required=f.flag("required", True),
        toolchain=f.text("toolchain", None),
        if_missing=f.text("if_missing", None),
        expect=f.text("expect", None),
    )
    need(req.check not in ("code", "present") or bool(req.files), f"{where}: check={req.check} needs files")
    need(
        req.check not in ("jit", "pure-triton", "python") or bool(req.toolchain),
        f"{where}: check={req.check} needs a toolchain text",
    )
    need(
        not req.kernels or req.check in ("code", "jit"),
        f"{where}: kernel patterns only apply to compiled code",
    )
    return req


def _variant(raw: Any, where: str) -> Variant:
    f = Fields(raw, where, ("name", "requirements", "gate", "note"), required=("name", "requirements"))
    gate = parse_gate(f.raw["gate"], f.at("gate")) if f.has("gate") else None
    return Variant(
        f.text("name"), f.items("requirements", _requirement, non_empty=True), gate, f.text("note", None)
    )


def parse_scan_rule(raw: Any, where: str, mode: str | None) -> ScanRule:
    """A record's ``scan`` object; ``mode`` is the record's (a compiled backend needs a ``code`` check)."""
    f = Fields(raw, where, ("gate", "variants", "notes", "sources"), required=("gate", "variants", "sources"))
    rule = ScanRule(
        gate=parse_gate(f.raw["gate"], f.at("gate")),
        variants=f.items("variants", _variant, non_empty=True),
        notes=f.texts("notes"),
        sources=f.texts("sources", non_empty=True),
    )
    names = [v.name for v in rule.variants]
    need(len(set(names)) == len(names), f"{where}: duplicate variant names {names}")
    need(
        mode != "compiled" or any(r.check == "code" for v in rule.variants for r in v.requirements),
        f"{where}: mode=compiled but no 'code' requirement",
    )
    return rule
