"""Every rule of the loadability table: plain / a / f SASS, PTX, families, iGPU, legacy Thor name."""

import pytest

from probe.arch.compat import Code, LoadVerdict, best, decide, min_driver_for_ptx
from probe.catalog.gpus import catalog, parse_target
from probe.errors import UsageError


def v(label: str, target: str, isa: str | None = None) -> LoadVerdict:
    return decide(Code.parse(label, isa), parse_target(target)).verdict


@pytest.mark.parametrize(
    ("label", "target", "expected"),
    [
        # plain SASS: same major, minor <= device minor
        ("sm_80", "sm_80", LoadVerdict.SASS),
        ("sm_80", "sm_86", LoadVerdict.SASS_COMPATIBLE),
        ("sm_80", "sm_89", LoadVerdict.SASS_COMPATIBLE),
        ("sm_86", "sm_80", LoadVerdict.NONE),
        ("sm_80", "sm_90", LoadVerdict.NONE),
        ("sm_90", "sm_100", LoadVerdict.NONE),
        ("sm_100", "sm_103", LoadVerdict.SASS_COMPATIBLE),
        ("sm_120", "sm_121", LoadVerdict.SASS_COMPATIBLE),
        ("sm_120", "sm_110", LoadVerdict.NONE),
        # iGPU exception: Orin (8.7) does not load dGPU sm_80/sm_86 SASS
        ("sm_80", "sm_87", LoadVerdict.NONE),
        ("sm_86", "sm_87", LoadVerdict.NONE),
        ("sm_87", "sm_87", LoadVerdict.SASS),
        # arch-specific a: exactly
        ("sm_90a", "sm_90", LoadVerdict.SASS),
        ("sm_90a", "sm_100", LoadVerdict.NONE),
        ("sm_100a", "sm_103", LoadVerdict.NONE),
        ("sm_120a", "sm_121", LoadVerdict.NONE),
        ("sm_110a", "sm_110", LoadVerdict.SASS),
        # family f
        ("sm_100f", "sm_100", LoadVerdict.SASS),
        ("sm_100f", "sm_103", LoadVerdict.SASS_COMPATIBLE),
        ("sm_100f", "sm_107", LoadVerdict.SASS_COMPATIBLE),
        ("sm_100f", "sm_110", LoadVerdict.NONE),
        ("sm_103f", "sm_100", LoadVerdict.NONE),
        ("sm_120f", "sm_121", LoadVerdict.SASS_COMPATIBLE),
        ("sm_121f", "sm_120", LoadVerdict.NONE),
        ("sm_110f", "sm_110", LoadVerdict.SASS),
        ("sm_120f", "sm_110", LoadVerdict.NONE),
        # Thor was sm_101 before CUDA 13
        ("sm_101", "sm_110", LoadVerdict.SASS_COMPATIBLE),
        ("sm_101a", "sm_110", LoadVerdict.SASS_COMPATIBLE),
        # plain PTX: any device >= N, any major
        ("compute_80", "sm_90", LoadVerdict.PTX_JIT),
        ("compute_80", "sm_121", LoadVerdict.PTX_JIT),
        ("compute_90", "sm_89", LoadVerdict.NONE),
        # PTX a / f
        ("compute_90a", "sm_90", LoadVerdict.PTX_JIT),
        ("compute_90a", "sm_100", LoadVerdict.NONE),
        ("compute_100f", "sm_103", LoadVerdict.PTX_JIT),
        ("compute_100f", "sm_120", LoadVerdict.NONE),
        ("compute_120f", "sm_121", LoadVerdict.PTX_JIT),
    ],
)
def test_rule(label, target, expected):
    assert v(label, target) is expected


def test_best_prefers_sass_over_ptx_and_exact_over_compatible():
    gpu = parse_target("sm_86")
    d = best([Code.parse("compute_80"), Code.parse("sm_80"), Code.parse("sm_86")], gpu)
    assert d.verdict is LoadVerdict.SASS and d.code == Code.parse("sm_86")
    d = best([Code.parse("compute_80"), Code.parse("sm_80")], gpu)
    assert d.verdict is LoadVerdict.SASS_COMPATIBLE
    d = best([Code.parse("compute_80", "9.0"), Code.parse("sm_90a")], parse_target("sm_120"))
    assert d.verdict is LoadVerdict.PTX_JIT and d.min_driver == "13.0"


def test_best_none_lists_what_exists():
    d = best([Code.parse("sm_90a")], parse_target("sm_110a"))
    assert d.verdict is LoadVerdict.NONE and "sm_90a" in d.reason
    assert best([], parse_target("sm_90")).reason == "no device code"


def test_fa3_sm90a_runs_nowhere_else_and_fa2_ptx_jits_on_hopper():
    fa3 = [Code.parse("sm_90a")]
    for t in ("sm_100", "sm_110", "sm_120"):
        assert best(fa3, parse_target(t)).verdict is LoadVerdict.NONE
    fa2 = [Code.parse("sm_80"), Code.parse("compute_80", "9.0")]
    assert best(fa2, parse_target("sm_90")).verdict is LoadVerdict.PTX_JIT
    assert best(fa2, parse_target("sm_86")).verdict is LoadVerdict.SASS_COMPATIBLE
    assert best(fa2, parse_target("sm_87")).verdict is LoadVerdict.PTX_JIT  # iGPU: SASS refused, PTX JITs


@pytest.mark.parametrize(
    "text", ["sm_110a", "sm_110", "110", "11.0", "thor", "Jetson AGX Thor", "compute_110f"]
)
def test_parse_target_forms(text):
    assert parse_target(text).sm == 110


def test_parse_target_unknown_cc_allowed_and_bad_names_rejected():
    assert parse_target("sm_130").sm == 130
    with pytest.raises(UsageError):
        parse_target("not-a-gpu")
    with pytest.raises(UsageError):
        parse_target("sm_5")


def test_catalog_covers_required_arches_and_families():
    cat = catalog()
    have = {g.sm for g in cat.gpus}
    assert {75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121} <= have
    assert cat.family_members(100) == [100, 103, 107]
    assert cat.family_members(110) == [110]
    assert cat.family_members(120) == [120, 121]
    assert cat.by_sm(87).integrated and cat.by_sm(110).unified_memory


def test_ptx_isa_driver_table():
    assert min_driver_for_ptx("8.8") == "12.9"
    assert min_driver_for_ptx("9.7") == "13.7"
    assert min_driver_for_ptx(None) is None
    assert min_driver_for_ptx("junk") is None


def _raw_catalog():
    import json
    from pathlib import Path

    import probe

    return json.loads((Path(probe.__file__).parent / "data" / "gpus.json").read_text())


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d["gpus"].append(dict(d["gpus"][0])),  # duplicate sm
        lambda d: d["gpus"][0].update(sm="75"),  # wrong type
        lambda d: d["gpus"][0].update(names=[]),  # no name
        lambda d: d["gpus"][0].update(colour="green"),  # unknown field
        lambda d: d["families"].update({"100": [103, 107]}),  # family without itself
        lambda d: d["families"].update({"120": [120, 130]}),  # family across majors
        lambda d: d.update(schema_version=2),
    ],
)
def test_catalog_validation_rejects_malformed_data(breakage):
    from probe.catalog.gpus import validate

    data = _raw_catalog()
    validate(data)  # the shipped file is valid
    breakage(data)
    with pytest.raises(ValueError):
        validate(data)
