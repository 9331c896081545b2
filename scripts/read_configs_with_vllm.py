#!/usr/bin/env python3
"""Record vLLM's own reading of model configs (what tests/catalog/test_vllm_reading.py compares to).

    python3 scripts/read_configs_with_vllm.py --python VENV/bin/python [CONFIG...] \\
        -o tests/data/configs/vllm_reading.json

CONFIG is a model folder (config.json, and hf_quant_config.json where there is one) or a config.json;
without any, every folder under tests/data/configs/. The reader (probe/oracle/child_model.py) runs in
VENV's Python, builds vLLM's ModelConfig and the model on the meta device for each config, and reads
every layer vLLM built (no GPU, no weights). The output keys each reading by its folder name and
records the vLLM version and the target the layers were built for.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from probe.oracle.read_model import read_with_vllm  # noqa: E402

DATA = ROOT / "tests" / "data" / "configs"


def _key(path: str) -> str:
    p = Path(path)
    return p.parent.name if p.name == "config.json" else p.name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "configs", nargs="*", help="model folders or config.json files (default: tests/data/configs/*)"
    )
    ap.add_argument(
        "--python", required=True, help="the interpreter of the vLLM to ask (a venv's bin/python)"
    )
    ap.add_argument("--pythonpath", action="append", default=[], help="extra PYTHONPATH entries for it")
    ap.add_argument("--sm", type=int, default=100, help="the GPU the layers are built for (default sm_100)")
    ap.add_argument("-o", "--output", required=True, help="the JSON file to write")
    args = ap.parse_args(argv)
    paths = args.configs or sorted(str(p) for p in DATA.iterdir() if (p / "config.json").is_file())
    t0 = time.monotonic()
    out = read_with_vllm(paths, python=args.python, pythonpath=args.pythonpath, sm=args.sm)
    readings = {}
    for r in out["readings"]:
        entry = {k: r[k] for k in ("config", "spec", "error") if k in r}
        if "error" in entry:  # the same text wherever the checkout lives
            entry["error"] = entry["error"].replace(str(Path(r["path"]).resolve()), _key(r["path"]))
        readings[_key(r["path"])] = entry
    doc = {
        "schema_version": 1,
        "what": "vLLM's own reading of each config: probe/oracle/child_model.py built vLLM's ModelConfig "
        "and the model on the meta device and read each layer vLLM built",
        "vllm": out.get("vllm"),
        "sm": out.get("sm"),
        "command": "python3 scripts/read_configs_with_vllm.py --python VENV/bin/python -o "
        "tests/data/configs/vllm_reading.json",
        "readings": dict(sorted(readings.items())),
    }
    Path(args.output).write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    errors = sum(1 for r in readings.values() if "error" in r)
    took = time.monotonic() - t0
    print(f"{len(readings)} configs read by vLLM {doc['vllm']} ({errors} refused) in {took:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
