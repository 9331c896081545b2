#!/usr/bin/env bash
# Issue 13 on a 2-GPU machine (device kind nvidia-h200-x2): TP=2 and TP=2 + expert-parallel engine
# cells of 122b / 35b / nano / gpt-oss-120b (dummy weights), journal + matrix under $OUT, then the
# GPU process listing (must be empty of probe processes) and the cells' after-teardown GPU checks.
# Run from the repository root, inside the image that has torch + vLLM:  bash benchmarks/gpu_issue13_tp2.sh
set -u
OUT="${OUT:-/tmp/issue13}"; mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpus.txt"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true
python3 -m probe run --kinds import,engine --models 122b,35b,nano,120b --engine-tp 2 --pairs auto:auto \
  --journal "$OUT/run.jsonl" -o "$OUT/matrix.json" 2>&1 | tee "$OUT/run.log"
echo "probe run exit: ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
echo "--- nvidia-smi --query-compute-apps after the run (expected: no probe / VLLM worker rows)"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tee "$OUT/compute_apps_after.txt"
python3 - "$OUT/run.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") != "engine":
        continue
    d = r.get("details") or {}
    print(f"{r['id']:<72} {r['outcome']:<12} {d.get('gpu_check')} leftovers={d.get('gpu_leftovers')} "
          f"parallel={d.get('parallel')} cause={(r.get('root_cause') or '')[:100]}")
PY
