#!/usr/bin/env bash
# Exercise gate / diff / merge / show / recommend on the committed fixture matrices.
# Run from anywhere:  bash ci/selftest.sh   (uses $PYTHON, default python3)
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
D=tests/matrix/data
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
fail=0

expect() {  # expect CODE DESCRIPTION -- command...
  local want="$1" what="$2"; shift 3
  "$@" >"$OUT/stdout" 2>"$OUT/stderr"
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL: $what: exit $got, expected $want"; sed 's/^/    /' "$OUT/stdout" "$OUT/stderr" | tail -20; fail=1
  elif grep -q "Traceback" "$OUT/stderr"; then
    echo "FAIL: $what: traceback on stderr"; fail=1
  else
    echo "ok:   $what (exit $got)"
  fi
}

probe() { "$PY" -m probe "$@"; }

expect 0 "gate passes an unchanged image" -- probe gate --baseline $D/baseline.json --current $D/current-unchanged.json \
  --models 122b,35b --require-arch 'sm_110a:*_moe_C*' --junit "$OUT/gate-ok.xml"
expect 1 "gate blocks a synthetic regression" -- probe gate --baseline $D/baseline.json --current $D/current-regression.json \
  --models 122b,35b --require-arch 'sm_110a:*_moe_C*' --junit "$OUT/gate-bad.xml" --summary "$OUT/summary.md"
grep -q "REGRESSION" "$OUT/summary.md" || { echo "FAIL: gate summary lacks REGRESSION"; fail=1; }
grep -q "<failure" "$OUT/gate-bad.xml" || { echo "FAIL: gate JUnit lacks failures"; fail=1; }
expect 4 "gate reports a failed probe run" -- probe gate --baseline $D/baseline.json --current $D/current-infra-failed.json
expect 2 "gate rejects a bad --require-arch" -- probe gate --baseline $D/baseline.json --current $D/current-unchanged.json \
  --require-arch 'sm_110a:no_such_file'
printf '{not json' > "$OUT/bad.json"
expect 6 "gate rejects a file that is not JSON" -- probe gate --baseline "$OUT/bad.json" --current $D/current-unchanged.json
expect 0 "diff shows what changed" -- probe diff $D/baseline.json $D/current-regression.json
grep -q "sm_110a" "$OUT/stdout" || { echo "FAIL: diff does not mention the lost arch"; fail=1; }
expect 0 "merge two matrices" -- probe merge $D/baseline.json $D/current-regression.json -o "$OUT/fleet.json"
expect 0 "show the fleet as HTML" -- probe show "$OUT/fleet.json" --format html -o "$OUT/fleet.html"
expect 0 "show a matrix as a table" -- probe show $D/baseline.json
expect 0 "show a matrix as Markdown" -- probe show $D/baseline.json --format md
expect 0 "show a matrix as JUnit" -- probe show $D/baseline.json --format junit -o "$OUT/cells.xml"
expect 0 "recommend from a measured matrix" -- probe recommend --model 122b --matrix $D/baseline.json --json
grep -q '"--moe-backend"' "$OUT/stdout" || { echo "FAIL: recommend printed no --moe-backend"; fail=1; }
expect 0 "recommend from the published matrices/" -- probe recommend --model 122b --gpu sm_110a
expect 2 "recommend refuses an unknown model" -- probe recommend --model qwen-122 --matrix $D/baseline.json
exit $fail
