#!/usr/bin/env bash
# The measuring calls of the 2026-11-23 H100 lease, after staging vLLM 0.26.0 + FlashInfer 0.6.14
# (+ FA2, CuTe-DSL) with ../shared/devkit (WITH_FA2=1 WITH_CUTE_DSL=1 PART_MB=48) and
# `. /tmp/stage/p7/vllm_device_install.sh`. Run from the repository root:
#   STEP=a bash matrices/measured/h100-session/measure.sh   # attention-layer matrix, FLASHINFER, GPU tests
#   STEP=b bash matrices/measured/h100-session/measure.sh   # flashinfer_* MoE cells, FLASHINFER engine pairs
# Step a starts FlashInfer's CUTLASS MoE JIT build detached (setsid), so it compiles across both calls.
# Everything lands in $W (default /tmp/h100); the caller tars it into $OUT.
set -u
W=${W:-/tmp/h100}; mkdir -p "$W"
export PYTHONPATH="/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD"  # pip --target skips .pth files
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 MAX_JOBS=16
END=$((SECONDS + ${CAP_S:-540}))
left() { echo $((END - SECONDS)); }
run_plan() {  # name plan jobs cap
  local cap=$4; [ "$cap" -gt "$(left)" ] && cap=$(left); [ "$cap" -lt 10 ] && { echo "skip $1" >> "$W/steps.log"; return; }
  local t=$SECONDS
  timeout -s INT "$cap" python3 -m probe run --plan-file "$2" --journal "$W/$1.jsonl" -o "$W/$1-matrix.json" \
    -j "$3" --resume --jit-timeout 1200 > "$W/$1.log" 2>&1
  echo "$1 rc=$? wall=$((SECONDS - t))s" >> "$W/steps.log"
}
warm() {  # name params-json (detached: survives the call while the machine stays warm)
  setsid nohup python3 -c "import json, sys; from probe.probes import jit_warm; from probe.probes.common import LocalContext; r = jit_warm.run(json.loads(sys.argv[1]), LocalContext()); open(sys.argv[2], 'w').write(json.dumps(r, indent=1, default=str)); print(r['outcome'], r['timings'])" "$2" "$W/$1.json" > "$W/$1.log" 2>&1 < /dev/null &
}
python3 benchmarks/gpu_session_issue11.py --dry-run --out "$W" > /dev/null 2>&1
P=$W/plans
if [ "${STEP:-a}" = a ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv > "$W/gpu.txt"
  warm warm-moe '{"flashinfer_moe": true}'
  python3 - "$P/plan-attention-fi.json" <<'PY' > "$W/fi-layouts.txt"
import json, sys
for c in json.load(open(sys.argv[1])): print(json.dumps({"attention_cells": [c["params"]]}))
PY
  i=0; while read -r line; do i=$((i+1)); warm "warm-attn$i" "$line"; done < "$W/fi-layouts.txt"
  (python3 -m pytest -q -m gpu tests/probes/test_gpu_probes.py -p no:cacheprovider > "$W/gpu-tests.log" 2>&1
   echo "rc=$?" >> "$W/gpu-tests.log") &
  TESTS=$!
  run_plan attention "$P/plan-attention.json" 1 330
  wait "$TESTS"
  run_plan attention-fi "$P/plan-attention-fi.json" 1 "$(left)"
else
  run_plan attention "$P/plan-attention.json" 1 150   # resumed: what step a's 330 s left
  for _ in $(seq 1 12); do [ -s "$W/warm-moe.json" ] && break; sleep 5; done   # at most 60 s more of JIT
  run_plan moe "$P/plan-moe.json" 2 200
  run_plan engine "$P/plan-engine.json" 1 "$(left)"
fi
du -sh ~/.cache/flashinfer ~/.triton 2>/dev/null >> "$W/steps.log"
cat "$W/steps.log"
