#!/usr/bin/env bash
# Regenerate matrices/predicted/vllm-0.26.0/ (one file per GPU) on the GPU box: vLLM 0.26.0 pins torch 2.11, so it
# runs there, not on the CPU machine. The oracle child never touches the GPU (CUDA_VISIBLE_DEVICES
# is emptied; each catalog target's capability is faked), so it can run beside other work.
#
#   PY=/opt/torch/.venv/bin/python SITE=/tmp/site bash matrices/predicted/predict_vllm026.sh
#
# PY   : the interpreter with torch 2.11 (default: python3)
# SITE : folder where the staged vllm-0.26.0-*.whl is unpacked (put first on the child's PYTHONPATH);
#        leave empty when vLLM 0.26.0 is installed in PY itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
SITE=${SITE:-}
args=(--python "$PY" --image "vllm-0.26.0 wheel on the GPU box (${SITE:-installed in $PY})"
      --note "regenerate: PY=$PY SITE=$SITE bash matrices/predicted/predict_vllm026.sh"
      -o matrices/predicted/vllm-0.26.0)
if [ -n "$SITE" ]; then args+=(--pythonpath "$SITE"); fi
python3 -m probe predict "${args[@]}"
