#!/usr/bin/env bash
# Measure tensor-parallel engine cells on a machine with two (or more) GPUs: TP=2 and TP=2 + expert-parallel
# engines of 122b / 35b / nano / gpt-oss-120b (2-layer, dummy weights), then check that nothing of probe's
# is left on the GPUs. Run from the repository root, inside the image that has torch + vLLM:
#
#   OUT=/tmp/tp2 bash scripts/measure_tp2.sh
#
# Writes to $OUT (default /tmp/probe-tp2): gpus.txt and topo.txt (nvidia-smi -L / topo -m), run.jsonl (the
# journal; re-running the script resumes it), matrix.json, run.log, compute_apps_after.txt (the GPU
# processes after the run: expected empty of probe / VLLM workers) and, on stdout, one line per engine
# cell with its outcome, the after-teardown GPU check and the parallel layout. Exit status: probe run's.
set -u
OUT="${OUT:-/tmp/probe-tp2}"; mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpus.txt"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true
resume=(); [ -s "$OUT/run.jsonl" ] && resume=(--resume)
python3 -m probe run --kinds import,engine --models 122b,35b,nano,120b --engine-tp 2 --pairs auto:auto \
  --journal "$OUT/run.jsonl" ${resume[@]+"${resume[@]}"} -o "$OUT/matrix.json" 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
echo "probe run exit: $rc" | tee -a "$OUT/run.log"
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
exit "$rc"
