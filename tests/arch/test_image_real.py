"""Images built from real PyPI wheels installed into a root filesystem (``pip install --no-deps
--target``): the image scan gives the same arches, file for file, as a scan of the image unpacked.

Wheels are downloaded once and cached under ~/.cache/probe-tests (tests/arch/wheels.py).
Both are ``slow`` (CI runs them): bitsandbytes (43 MB, a few seconds) and vLLM 0.33.0 +
flashinfer-cubin 0.6.13 (2.6 GB unpacked, minutes). The layout is cross-checked with
``skopeo inspect`` / ``umoci`` when they are installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from probe.arch.image import scan_image
from probe.arch.scanner import scan_paths
from tests.arch import wheels
from tests.arch.image_build import apply_layers, compress, tar_members, tar_tree, write_oci_layout

SITE = "usr/lib/python3.12/site-packages"


def _wheel(name: str) -> Path:
    try:
        return wheels.wheel(name)
    except RuntimeError as exc:
        pytest.skip(f"cannot download {name}: {exc}")


def _install_layer(tmp: Path, whl: Path, i: int) -> tuple[Path, Path]:
    stage = tmp / f"stage{i}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--target",
            str(stage / SITE),
            str(whl),
        ],
        check=True,
        capture_output=True,
    )
    t = tmp / f"layer{i}.tar"
    tar_tree(t, stage)
    shutil.rmtree(stage)
    plain = tmp / f"plain{i}.tar"
    shutil.copyfile(t, plain)
    return t, plain


def _compare(image: Path, plain: list[Path], tmp: Path) -> dict[str, tuple]:
    res = scan_image(str(image), use_cache=False)
    root = tmp / "rootfs"
    apply_layers(plain, root)
    real = str(root.resolve())

    def key(p: str) -> str:
        return p.split("!/", 1)[1] if "!/" in p else os.path.relpath(os.path.realpath(p), real)

    def facts(files):  # type: ignore[no-untyped-def]
        return {
            key(f.path): (
                f.kind,
                f.package,
                f.package_version,
                f.error,
                f.containers,
                f.relocatable_containers,
                sorted((e.section, e.container, e.kind, e.arch, e.offset) for e in f.entries),
            )
            for f in files
        }

    got, want = facts(res.files), facts(scan_paths([root], use_cache=False))
    shutil.rmtree(root)
    assert got == want
    return got


@pytest.mark.slow
@pytest.mark.network
def test_bitsandbytes_image(tmp_path: Path) -> None:
    t, plain = _install_layer(tmp_path, _wheel("bitsandbytes"), 0)
    sos = sorted(n for n in tarfile_names(plain) if n.endswith(".so"))
    assert len(sos) > 3
    # layer 1 deletes one library and replaces another by a copy of a third
    upd = tmp_path / "upd.tar"
    tar_members(
        upd,
        [
            (os.path.dirname(sos[0]) + "/.wh." + os.path.basename(sos[0]), b""),
            (sos[1], extract(plain, sos[2])),
        ],
    )
    plain_upd = tmp_path / "plain_upd.tar"
    shutil.copyfile(upd, plain_upd)
    layout = write_oci_layout(tmp_path / "oci", {"linux/amd64": [compress(t, "gzip"), compress(upd, "zstd")]})
    got = _compare(layout, [plain, plain_upd], tmp_path)
    assert sos[0] not in got and got[sos[1]][6] == got[sos[2]][6]
    assert {v[1:3] for v in got.values()} == {("bitsandbytes", "0.50.2")}
    assert sum(1 for v in got.values() if v[6]) >= 3
    envs = scan_image(str(layout), use_cache=False).environments
    assert envs[0].packages == {"bitsandbytes": "0.50.2"}
    _cross_check(layout)


def tarfile_names(t: Path) -> list[str]:
    import tarfile

    with tarfile.open(t) as tf:
        return [m.name for m in tf if m.isfile()]


def extract(t: Path, name: str) -> bytes:
    import tarfile

    with tarfile.open(t) as tf:
        f = tf.extractfile(name)
        assert f is not None
        return f.read()


def _cross_check(layout: Path) -> None:
    """The layout written by the tests is one the real tools accept (when installed)."""
    skopeo = shutil.which("skopeo")
    if skopeo:
        out = subprocess.run([skopeo, "inspect", f"oci:{layout}"], capture_output=True, text=True, check=True)
        assert json.loads(out.stdout)["Architecture"] == "amd64"
    umoci = shutil.which("umoci")
    if umoci:
        tags = subprocess.run([umoci, "ls", "--layout", str(layout)], capture_output=True, text=True)
        assert tags.returncode == 0, tags.stderr


@pytest.mark.network
@pytest.mark.slow
def test_vllm_flashinfer_image(tmp_path: Path) -> None:
    tars = [_install_layer(tmp_path, _wheel(n), i) for i, n in enumerate(("vllm", "flashinfer-cubin"))]
    blobs = [compress(t, c) for (t, _), c in zip(tars, ("zstd", "gzip"), strict=True)]
    layout = write_oci_layout(tmp_path / "oci", {"linux/amd64": blobs}, move=True)
    got = _compare(layout, [p for _, p in tars], tmp_path)
    moe = got[f"{SITE}/vllm/_moe_C_stable_libtorch.abi3.so"]
    assert moe[1:3] == ("vllm", "0.33.0") and any(e[3] == "sm_120f" for e in moe[6])
    assert sum(1 for k in got if k.endswith(".cubin")) > 10_000
