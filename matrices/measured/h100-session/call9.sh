#!/usr/bin/env bash
# Third measuring call of the 2026-11-23 H100 lease (vLLM 0.26.0 + FlashInfer 0.6.14 staged with
# ../shared/devkit, FA2 + CuTe-DSL switches on; parts 1-2 of benchmarks/gpu_session_issue11.py ran
# before it and left FlashInfer's JIT cache for the gpt-oss head layouts): the FLASHINFER attention-layer
# cells (layouts with a warm JIT cache first) and, beside them, the GPU tests of the typed-cell refactor.
set -u
W=${W:-/tmp/w9}; mkdir -p "$W"
PLAN=${PLAN:-/tmp/w8/s2/plans/plan-attention-fi.json}
python3 - "$PLAN" "$W/plan-fi.json" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))
cells.sort(key=lambda c: "sinks" not in c["id"])  # JIT already built for the sinks layouts
json.dump(cells, open(sys.argv[2], "w"), indent=1)
PY
(python3 -m pytest -q -m gpu tests/probes/test_gpu_probes.py -p no:cacheprovider > "$W/gpu-tests.log" 2>&1
 echo "rc=$?" >> "$W/gpu-tests.log") &
timeout "${CAP_S:-480}" python3 -m probe run --plan-file "$W/plan-fi.json" --journal "$W/attention-fi.jsonl" \
  -o "$W/attention-fi-matrix.json" -j 1 --jit-timeout 1200 > "$W/attention-fi.log" 2>&1
echo "probe run rc=$?" >> "$W/attention-fi.log"
wait
