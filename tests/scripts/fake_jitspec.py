"""A stand-in for FlashInfer's ``JitSpec`` (``tests/scripts/test_flashinfer_aot.py``): two C files compiled
and linked into a shared library by ninja, under ``$FAKE_JITSPEC_ROOT``."""

from __future__ import annotations

import os
from pathlib import Path


class Spec:
    def __init__(self, root: Path) -> None:
        self.name = "fused_moe_test"
        self.build_dir = root / "build"
        self.ninja_path = self.build_dir / "build.ninja"
        self.aot_path = root / "aot" / self.name / f"{self.name}.so"

    def write_ninja(self) -> None:
        b = self.build_dir
        b.mkdir(parents=True, exist_ok=True)
        for n in ("a", "b"):
            (b / f"{n}.c").write_text(f"int {n}(void) {{ return 1; }}\n")
        self.ninja_path.write_text(
            "rule cc\n  command = cc -fPIC -c $in -o $out\n"
            "rule link\n  command = cc -shared $in -o $out\n"
            f"build {b}/a.o: cc {b}/a.c\nbuild {b}/b.o: cc {b}/b.c\n"
            f"build {b}/{self.name}.so: link {b}/a.o {b}/b.o\n"
        )


def make() -> Spec:
    return Spec(Path(os.environ["FAKE_JITSPEC_ROOT"]))
