"""File / kernel / container verdicts built on probe.arch.compat, demangling, local GPU probing."""

from __future__ import annotations

from probe.arch.compat import Code, LoadVerdict
from probe.arch.demangle import demangle
from probe.arch.localgpu import local_gpus
from probe.arch.records import Entry, FileRecord, KernelInfo
from probe.arch.scanner import build_report
from probe.arch.verdicts import container_coverage, file_codes, file_verdicts, kernel_codes, verdict_for
from probe.catalog.gpus import parse_target


def _e(arch: str, container: int = 0, *, loadable: bool = True, isa: str | None = None) -> Entry:
    code = Code.parse(arch)
    return Entry(
        section=".nv_fatbin" if loadable else "__nv_relfatbin",
        container=container,
        kind=code.kind,
        arch=arch,
        sm=code.sm,
        suffix=code.suffix,
        ptx_isa=isa,
        loadable=loadable,
        size=10,
    )


def _rec(*entries: Entry, kernels: list[KernelInfo] | None = None) -> FileRecord:
    return FileRecord(
        path="/x/lib.so",
        kind="elf",
        containers=len({e.container for e in entries}),
        entries=list(entries),
        kernels=kernels,
    )


def test_file_codes_dedupe_and_skip_relocatable():
    rec = _rec(
        _e("sm_80"),
        _e("sm_80", 1),
        _e("compute_80", isa="8.5"),
        _e("compute_80", 1, isa="9.0"),
        _e("sm_90", 2, loadable=False),
    )
    assert [(c.label, c.ptx_isa) for c in file_codes(rec)] == [("sm_80", None), ("compute_80", "9.0")]


def test_verdicts_sass_compatible_ptx_none_family_igpu():
    rec = _rec(_e("sm_80"), _e("compute_80", isa="9.0"), _e("sm_100f", 1), _e("sm_90a", 2))
    codes = file_codes(rec)
    cases = {
        "sm_80": LoadVerdict.SASS,
        "sm_86": LoadVerdict.SASS_COMPATIBLE,
        "sm_87": LoadVerdict.PTX_JIT,
        "sm_90": LoadVerdict.SASS,
        "sm_103": LoadVerdict.SASS_COMPATIBLE,
        "sm_110": LoadVerdict.PTX_JIT,
        "sm_121": LoadVerdict.PTX_JIT,
    }
    for target, want in cases.items():
        assert verdict_for(codes, parse_target(target)).verdict is want, target
    d = verdict_for(codes, parse_target("sm_120"))
    assert d.verdict is LoadVerdict.PTX_JIT and d.min_driver == "13.0"
    assert verdict_for([Code.parse("sm_90a")], parse_target("sm_100")).verdict is LoadVerdict.NONE
    assert verdict_for([], parse_target("sm_100")).reason == "no device code"


def test_container_coverage_counts_containers():
    rec = _rec(_e("sm_80"), _e("sm_90a", 1), _e("sm_100f", 2), _e("compute_80", 2))
    assert container_coverage(rec, parse_target("sm_90")) == (2, 3)  # sm_90a + compute_80 JIT
    assert container_coverage(rec, parse_target("sm_103")) == (1, 3)
    assert container_coverage(rec, parse_target("sm_75")) == (0, 3)


def test_kernel_codes_and_per_kernel_rows():
    kernels = [
        KernelInfo(name="void marlin<4>()", mangled="_Z6marlinILi4EEvv", codes=["sm_80", "sm_120f"]),
        KernelInfo(name="other()", mangled="_Z5otherv", codes=["sm_80", "sm_90a", "sm_110"]),
    ]
    rec = _rec(_e("sm_80"), _e("sm_120f", 0), _e("sm_90a", 1), _e("sm_110", 1), kernels=kernels)
    kc = kernel_codes(rec)
    assert {k: [c.label for c in v] for k, v in kc.items()} == {
        "void marlin<4>()": ["sm_80", "sm_120f"],
        "other()": ["sm_80", "sm_90a", "sm_110"],
    }
    rows = file_verdicts([rec], [parse_target("sm_110"), parse_target("sm_121")], per_kernel=True)
    got = {(t, r.kernel): tv.verdict for r in rows for t, tv in r.targets.items()}
    assert got == {
        ("sm_110", None): "sass",
        ("sm_110", "void marlin<4>()"): "none",
        ("sm_110", "other()"): "sass",
        ("sm_121", None): "sass-compatible",
        ("sm_121", "void marlin<4>()"): "sass-compatible",
        ("sm_121", "other()"): "none",
    }


def test_report_shape():
    rec = _rec(_e("sm_90a"))
    bad = FileRecord(path="/x/bad.so", error="not an ELF file")
    rep = build_report([rec, bad], [parse_target("sm_90")], source="argument", roots=["/x"])
    assert rep.schema_version == 1 and rep.summary.errors == 1 and rep.summary.with_device_code == 1
    assert [(v.path, v.targets["sm_90"].verdict, v.targets["sm_90"].via) for v in rep.verdicts] == [
        ("/x/lib.so", "sass", "sm_90a")
    ]
    assert rep.targets[0].to_dict() == {
        "target": "sm_90",
        "cc": "9.0",
        "name": rep.targets[0].name,
        "source": "argument",
    }


def test_demangle():
    assert demangle("_ZN8probe_fx7add_oneEPf") == "probe_fx::add_one(float*)"
    assert demangle("plain_c_kernel") == "plain_c_kernel"
    assert demangle("_Znot-a-valid-name") == "_Znot-a-valid-name"


def test_local_gpus_never_raises():
    assert local_gpus("libdoes-not-exist.so.1") == []
    for g in local_gpus():  # real driver when there is one, else nothing
        assert g.sm >= 30 and g.name
