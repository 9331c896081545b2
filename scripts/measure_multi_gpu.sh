#!/usr/bin/env bash
# Measure multi-GPU engine cells on a machine with two (or more) GPUs: tensor-parallel engines (TP, TP +
# expert-parallel) and, with DP set, data-parallel expert-parallel engines, one per all2all backend
# (those whose package the image lacks end not_run), of 2-layer dummy-weight models; then check that
# nothing of probe's is left on the GPUs. Run from the repository root, inside the image that has torch +
# vLLM:
#
#   OUT=/tmp/mgpu MODELS=122b,35b,nano,120b TP=2 DP=2 BUDGET=9m bash scripts/measure_multi_gpu.sh
#
# Knobs (environment): MODELS (default 122b,35b,nano,120b), TP (--engine-tp, default 2), DP (--engine-dp,
# default none), ALL2ALL (--all2all, default all), PAIRS (default auto:auto), ENGINE_ARGS (--engine-args),
# BUDGET (--budget, default none). Writes to $OUT (default /tmp/probe-multi-gpu): gpus.txt and topo.txt
# (nvidia-smi -L / topo -m), run.jsonl (the journal; re-running the script resumes it), matrix.json,
# run.log, compute_apps_after.txt (the GPU processes after the run: expected empty of probe / VLLM workers)
# and, on stdout, one line per engine cell with its outcome, seconds, the after-teardown GPU check and the
# parallel layout. Exit status: probe run's.
set -u
OUT="${OUT:-/tmp/probe-multi-gpu}"; mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpus.txt"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true
args=(--kinds import,engine --models "${MODELS:-122b,35b,nano,120b}" --engine-tp "${TP:-2}"
      --pairs "${PAIRS:-auto:auto}" --journal "$OUT/run.jsonl" -o "$OUT/matrix.json")
[ -n "${DP:-}" ] && args+=(--engine-dp "$DP" --all2all "${ALL2ALL:-all}")
[ -n "${ENGINE_ARGS:-}" ] && args+=(--engine-args "$ENGINE_ARGS")
[ -n "${BUDGET:-}" ] && args+=(--budget "$BUDGET")
[ -s "$OUT/run.jsonl" ] && args+=(--resume)
python3 -m probe run "${args[@]}" 2>&1 | tee "$OUT/run.log"
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
    print(f"{r['id']:<96} {r['outcome']:<12} {r.get('wall_s') or 0:6.1f}s {d.get('gpu_check')} "
          f"leftovers={d.get('gpu_leftovers')} parallel={d.get('parallel')} "
          f"cause={(r.get('root_cause') or '')[:140]}")
PY
exit "$rc"
