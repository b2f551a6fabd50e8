#!/usr/bin/env bash
# A benchmarks/h200_sglang.py run that outlives the device tool's 10-minute calls: the first call
# starts it in a session of its own (setsid: it runs on between calls while the machine is held),
# each call then waits for it up to WAIT seconds and brings back what it has so far. No server is
# started again at a call's end, as one that resumes from the sweep's journal must (a 27B server
# start is ~2 min). The machine goes back 30 s after a call: chain the calls at once, and keep
# what came back (the journal, carried in .device/runs, resumes it on a fresh machine).
#   bash benchmarks/h200_detached.sh start 560 --budget 1700 setup mtp27   # env vars as for the phase
#   bash benchmarks/h200_detached.sh wait 570
set -uo pipefail
DIR=/tmp/h200-detached
cmd=$1 wait_s=$2
shift 2
if [ "$cmd" = start ]; then
  mkdir -p "$DIR/out"
  setsid nohup python3 benchmarks/h200_sglang.py --out "$DIR/out" "$@" >"$DIR/console.txt" 2>&1 </dev/null &
  echo $! >"$DIR/pid"
fi
end=$((SECONDS + wait_s))
while kill -0 "$(cat "$DIR/pid")" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
if kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then echo "detached: still running"; else echo "detached: finished"; fi
tail -n 30 "$DIR/console.txt"
# what it has so far: its own outputs, and each run folder's journal and sweep log
cp "$DIR"/out/* "$OUT"/ 2>/dev/null
for run in outputs/h200-*/; do
  [ -f "$run/sweep_journal.jsonl" ] && cp "$run/sweep_journal.jsonl" "$OUT/$(basename "$run").journal.jsonl"
  [ -f "$run/logs/sweep.log" ] && cp "$run/logs/sweep.log" "$OUT/$(basename "$run").sweep.log"
done
ls -la "$OUT"
