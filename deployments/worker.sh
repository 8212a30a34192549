#!/bin/sh
# A Prefect process worker as this pipeline runs it:
#
#   sh deployments/worker.sh consolidation-cpu        # or consolidation-gpu; extra args go to the worker
#
# --limit 1: the worker runs one flow run at a time and, while it runs one, does not ask the
#   server for more. A second run of a deployment waits Scheduled (Late once its time has
#   passed) instead of being proposed, refused ("Aborted submission ... non-pending state
#   'SCHEDULED'") and logged every 30 s. The deployments' concurrency limit (ENQUEUE) still
#   keeps two workers from running one deployment twice.
# SIGTERM stops it now: Prefect's worker takes a first SIGTERM as "drain" (take no new runs, wait
#   for the running one, however long it trains) and a second as "stop", which kills the worker
#   but leaves its flow-run process (and torchrun) running unsupervised. This script drains the
#   worker, SIGTERMs the flow-run process as a Prefect cancellation would (the run is marked
#   Crashed, torchrun writes a snapshot and exits), waits for it (SIGKILL after STOP_GRACE_S,
#   default 90), then stops the worker: `docker compose stop` or `kill PID` ends it in seconds
#   plus the snapshot's time (give a container a stop grace period that covers it), and the next
#   trigger resumes the night (lineage run still running, training from the snapshot).
#   SIGINT (Ctrl-C) keeps Prefect's drain.
set -eu
pool=${1:?usage: sh deployments/worker.sh POOL [worker options]}
shift
prefect worker start --pool "$pool" --type "${WORKER_TYPE:-process}" --limit 1 "$@" &
worker=$!
# The flow-run processes the worker started (its children; no pgrep in slim images).
runs() { grep -l "^PPid:[[:space:]]*$worker\$" /proc/[0-9]*/status 2>/dev/null | cut -d/ -f3 || true; }
stop() {
  started=$(runs)
  kill -TERM "$worker" 2>/dev/null || exit 0   # drain: take no new runs
  # End the running flow runs as Prefect's own cancellation does: SIGTERM to the flow-run process
  # (its run is marked Crashed; the training task stops torchrun, which writes a snapshot), then
  # SIGKILL after a grace period. Wait for them: a container stops, killing whatever is left,
  # as soon as its first process exits.
  for pid in $started; do kill -TERM "$pid" 2>/dev/null || true; done
  deadline=$(( $(date +%s) + ${STOP_GRACE_S:-90} ))
  for pid in $started; do
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  kill -TERM "$worker" 2>/dev/null || true     # a second SIGTERM: stop now
}
trap stop TERM
trap 'kill -INT "$worker" 2>/dev/null || true' INT
# `wait` returns when a trapped signal arrives; wait again for the worker itself to exit.
status=0
wait "$worker" || status=$?
while kill -0 "$worker" 2>/dev/null; do
  wait "$worker" || status=$?
done
exit "$status"
