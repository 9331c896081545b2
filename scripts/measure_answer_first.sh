#!/usr/bin/env bash
# The step after an image rebuild, measured: `probe run --models MODEL --budget B` on this GPU, inside the
# image (torch + vLLM importable), then `probe recommend` from the matrix it wrote. Run from the repository
# root:
#
#   OUT=/tmp/answer MODEL=35b BUDGET=3m bash scripts/measure_answer_first.sh
#
# Writes to $OUT (default /tmp/probe-answer-$MODEL-$BUDGET): gpus.txt (nvidia-smi -L), dry-run.txt (the plan:
# order, estimates, what the budget leaves out), run.jsonl (+ .warm.jsonl: the JIT pre-pass), matrix.json,
# run.log, wall.txt (the run's wall seconds), recommend.txt / recommend.json (the answer from that matrix
# alone) and halves.txt (per half: the cells measured at the model's shape and their outcomes).
# Exit status: probe run's.
set -u
MODEL="${MODEL:-35b}"; BUDGET="${BUDGET:-3m}"
OUT="${OUT:-/tmp/probe-answer-$MODEL-$BUDGET}"; mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpus.txt" 2>&1 || true
python3 -m probe run --models "$MODEL" --budget "$BUDGET" --dry-run > "$OUT/dry-run.txt" 2>&1
start=$(date +%s)
python3 -m probe run --models "$MODEL" --budget "$BUDGET" --journal "$OUT/run.jsonl" -o "$OUT/matrix.json" \
  > "$OUT/run.log" 2>&1
rc=$?
echo "$(( $(date +%s) - start ))" > "$OUT/wall.txt"
echo "probe run exit: $rc, wall $(cat "$OUT/wall.txt") s (budget $BUDGET)" | tee -a "$OUT/run.log"
python3 -m probe recommend --model "$MODEL" --matrix "$OUT/matrix.json" > "$OUT/recommend.txt" 2>&1
python3 -m probe recommend --model "$MODEL" --matrix "$OUT/matrix.json" --json > "$OUT/recommend.json" 2>/dev/null
python3 - "$OUT/run.jsonl" > "$OUT/halves.txt" <<'PY'
import collections, json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
by = collections.defaultdict(collections.Counter)
for r in rows:
    if "kind" in r:
        by[r["kind"]][r["outcome"]] += 1
for kind, tally in sorted(by.items()):
    print(f"{kind:<10} " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
PY
cat "$OUT/halves.txt" "$OUT/recommend.txt"
exit "$rc"
