"""probe.sandbox.ninja: a ninja build's steps and how many are done; CompileWatch's progress from them."""

from __future__ import annotations

from pathlib import Path

from probe.sandbox import jit, ninja


def _flashinfer_module(root: Path, name: str, sources: int) -> Path:
    """A build.ninja as flashinfer.jit writes it: absolute object paths beside it, one link step."""
    out = root / "cached_ops" / name
    out.mkdir(parents=True)
    lines = ["ninja_required_version = 1.3", f"name = {name}", "", "rule cuda_compile",
             "  command = $nvcc -c $in -o $out", "rule link", "  command = $cxx $in -o $out", ""]  # fmt: skip
    objs = []
    for i in range(sources):
        obj = out / f"src_k{i}.cuda.o"
        objs.append(str(obj))
        lines.append(f"build {obj}: cuda_compile /src/k{i}.cu")
    lines += [
        f"build {out / (name + '.so')}: link $\n    " + " ".join(objs),
        f"default {out / (name + '.so')}",
    ]
    (out / "build.ninja").write_text("\n".join(lines) + "\n")
    return out


def test_steps_of_a_flashinfer_module_counted_on_disk(tmp_path):
    mod = _flashinfer_module(tmp_path, "fused_moe_90", 5)
    for i in range(2):
        (mod / f"src_k{i}.cuda.o").write_bytes(b"")
    files = ninja.BuildFiles()
    assert files.units([str(mod / "build.ninja")]) == ninja.Units(2, 6, "build.ninja")
    (mod / "src_k2.cuda.o").write_bytes(b"")
    assert files.units([str(mod / "build.ninja")]).done == 3


def test_subninja_of_the_top_build_file_is_followed(tmp_path):
    """flashinfer.jit.build_jit_specs: ``ninja -C cached_ops -f tmp/flashinfer_jit.ninja`` with one
    ``subninja`` per module."""
    a = _flashinfer_module(tmp_path, "a", 2)
    b = _flashinfer_module(tmp_path, "b", 3)
    top = tmp_path / "flashinfer_jit.ninja"
    top.write_text(
        f"ninja_required_version = 1.3\nsubninja {a / 'build.ninja'}\nsubninja {b / 'build.ninja'}\n"
    )
    argv = ["ninja", "-v", "-C", str(tmp_path / "cached_ops"), "-f", str(top)]
    got = ninja.ninja_files(argv)
    assert got == (str(top), tmp_path / "cached_ops")
    assert ninja.BuildFiles().units([got[0]], {got[0]: got[1]}) == ninja.Units(0, 7, "build.ninja")


def test_relative_outputs_and_phony_edges(tmp_path):
    """torch.utils.cpp_extension: outputs relative to the build folder; phony edges are not steps."""
    (tmp_path / "build.ninja").write_text(
        "rule compile\n  command = c++ $in -o $out\nbuild a.o: compile ../a.cpp\n"
        "build b.o: compile ../b.cpp\nbuild ext.so: link a.o b.o\nbuild all: phony ext.so\ndefault all\n"
    )
    (tmp_path / "a.o").write_bytes(b"")
    assert ninja.BuildFiles().units([str(tmp_path / "build.ninja")]) == ninja.Units(1, 3, "build.ninja")


def test_status_lines():
    assert ninja.status_line("[57/183] /usr/local/cuda/bin/nvcc -c x.cu -o x.cuda.o") == (57, 183)
    assert ninja.status_line("[a/b] nvcc") is None and ninja.status_line("[9/3] x") is None


def test_compile_watch_counts_units_and_estimates_what_is_left(tmp_path):
    mod = _flashinfer_module(tmp_path, "fused_moe_90", 9)
    argv = {1: ["ninja", "-v", "-C", str(mod), "-f", str(mod / "build.ninja")]}
    w = jit.CompileWatch(read_comm=lambda pid: "ninja", read_cmdline=argv.__getitem__, units_interval_s=0.0)
    w.sample([1], now=0.0)
    assert w.units == ninja.Units(0, 10, "build.ninja") and w.progress().eta_s is None
    for i in range(3):
        (mod / f"src_k{i}.cuda.o").write_bytes(b"")
    w.sample([1], now=30.0)
    p = w.progress()
    assert p.units == ninja.Units(3, 10, "build.ninja") and p.eta_s == 70.0  # 3 steps in 30 s, 7 left
    assert "3 of 10 units built, ~70 s left" in p.text()
    cause = w.stopped_cause("the run's time budget was spent") or ""
    assert cause.startswith("compile budget exceeded after 30 s, 3 of 10 units built")
    assert cause.endswith("; the run's time budget was spent")
    assert w.details()["jit_units"] == {"done": 3, "total": 10, "from": "build.ninja"}


def test_ninja_status_in_the_output_when_no_build_file_is_seen():
    w = jit.CompileWatch(read_comm=lambda pid: None, read_cmdline=lambda pid: [])
    w.feed_output(b"[12/40] /usr/local/cuda/bin/nvcc -c a.cu -o a.cuda.o\n", now=1.0)
    assert w.units == ninja.Units(12, 40, "ninja status")
