#!/usr/bin/env bash
# The reliability study's two long runs (issue 12) in one call on a many-core host (the lent GPU host: its CPU only), side by side,
# each pinned to its own cores:
#   * benchmarks/reliability/fuzz_parsers.py: hypothesis on all 11 parsers of outside data, one worker per core,
#     time budget FUZZ_MINUTES (goal: >= 100 000 inputs per parser);
#   * benchmarks/reliability/soak_people.py: `jetforge app people` (SSDLite CNN on ONNX Runtime's CPU provider, tracking,
#     MP4 + events sinks) on looped vtest.avi: a SIGTERM run, then the long run with RSS sampled, time budget
#     SOAK_MINUTES (goal: >= 20 000 frames, RSS growth < 1 % per 20 000 frames after warm-up).
#
# On the workstation (network, the project's venv), once:
#   bash benchmarks/reliability/long_runs_device.sh --prepare     -> build/issue12_device/ (wheels, vtest.avi, detector ONNX)
#   bash benchmarks/reliability/long_runs_device.sh --dry-run     (a few inputs and frames each, ~2 min on 2 cores)
# On the host (python3 with numpy, onnxruntime, OpenCV; no network, no jetforge install), carrying
# build/issue12_device:
#   bash benchmarks/reliability/long_runs_device.sh               (~9.5 min; everything lands in $OUT, default /tmp/jf_issue12)
# Cores: FUZZ_CORES (default 0-11) and SOAK_CORES (default 12-15), taskset lists; FUZZ_MINUTES, SOAK_MINUTES,
# FUZZ_EXAMPLES (per parser), FUZZ_SEED (a second run takes other seeds), FUZZ_CHUNK; PACK_LOGS=1 tars the logs. On the H200 host's Xeon
# (first run, 10 cores) the fuzzers did 174 inputs per core-second: 1.1 M inputs need ~530 s on 12 cores.
set -uo pipefail
HERE="$(cd "$(dirname "$0")/../.." && pwd)"   # the checkout's root
PY="${PYTHON:-python3}"   # the workstation's venv when there is one (it is not carried to the host)
[ -z "${PYTHON:-}" ] && [ -x "$HERE/.venv/bin/python" ] && PY="$HERE/.venv/bin/python"

if [ "${1:-}" = "--prepare" ]; then
  "$PY" "$HERE/benchmarks/reliability/soak_people.py" --prepare   # the wheels both scripts need, the clip and the detector
  exit $?
fi

OUT="${OUT:-/tmp/jf_issue12}"
mkdir -p "$OUT"
export OUT
FUZZ_CORES="${FUZZ_CORES:-0-11}"
SOAK_CORES="${SOAK_CORES:-12-15}"
FUZZ_ARGS=(--minutes "${FUZZ_MINUTES:-8.8}" --chunk "${FUZZ_CHUNK:-2000}" --examples "${FUZZ_EXAMPLES:-100000}"
           --seed "${FUZZ_SEED:-20261201}")
SOAK_ARGS=(--minutes "${SOAK_MINUTES:-7}")
if [ "${1:-}" = "--dry-run" ]; then
  FUZZ_CORES=0; SOAK_CORES="$(( $(nproc) > 1 ? 1 : 0 ))"
  FUZZ_ARGS=(--dry-run --out "$OUT/fuzz_parsers.json"); SOAK_ARGS=(--dry-run --out "$OUT/soak_people.json")
fi
HAVE_TASKSET=1
command -v taskset >/dev/null || { echo "issue12: no taskset here: the two runs share all cores"; HAVE_TASKSET=0; }
pin() { local cores="$1"; shift; if [ "$HAVE_TASKSET" = 1 ]; then taskset -c "$cores" "$@"; else "$@"; fi; }
FUZZ_JOBS="$(pin "$FUZZ_CORES" "$PY" -c 'import os; print(len(os.sched_getaffinity(0)))')"

echo "issue12: fuzz on cores $FUZZ_CORES ($FUZZ_JOBS jobs), soak on cores $SOAK_CORES; outputs in $OUT"
cd "$HERE"
pin "$FUZZ_CORES" "$PY" benchmarks/reliability/fuzz_parsers.py --jobs "$FUZZ_JOBS" "${FUZZ_ARGS[@]}" \
  >"$OUT/fuzz.log" 2>&1 &
FUZZ_PID=$!
pin "$SOAK_CORES" "$PY" benchmarks/reliability/soak_people.py "${SOAK_ARGS[@]}" >"$OUT/soak.log" 2>&1 &
SOAK_PID=$!
wait "$FUZZ_PID"; FUZZ_RC=$?
wait "$SOAK_PID"; SOAK_RC=$?
echo "== fuzz (exit $FUZZ_RC)"; grep -v 'input/s' "$OUT/fuzz.log" | tail -16
echo "== soak (exit $SOAK_RC)"; grep -v 'frame/s' "$OUT/soak.log" | tail -6
if [ -n "${PACK_LOGS:-}" ]; then  # few files back: the two JSONs, and one tar of the logs and the plot
  (cd "$OUT" && tar -cf issue12_logs.tar fuzz.log soak.log $(ls soak_people_rss.png 2>/dev/null) \
     && rm -f fuzz.log soak.log soak_people_rss.png)
fi
ls -la "$OUT"
exit $(( FUZZ_RC || SOAK_RC ))
