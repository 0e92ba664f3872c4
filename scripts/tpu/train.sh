#!/usr/bin/env bash
# Start a gin experiment on every worker of a TPU VM slice (multi-host JAX), in the background.
#
#   scripts/tpu/train.sh --name=bert-v3-32 --zone=europe-west4-a \
#       --gin-file=configs/experiments/bert_base_tpu_v3_32.gin --workdir=gs://BUCKET/bert_base \
#       [--project=P] [-- --gin.NUM_STEPS=1000 ...]
#   scripts/tpu/train.sh --name=bert-v3-32 --zone=europe-west4-a --stop
#
# Every worker runs the same `bertjax-train --distributed` (jax.distributed.initialize() finds
# the peers on a TPU VM), detached from the ssh session, logging to ~/bertjax-train.log; watch
# it with scripts/tpu/logs.sh. The workdir must be on gs:// so every host writes the same
# checkpoints; rerunning the same command resumes from the newest one. The gin file's mesh
# must match the slice (configs/meshes/tpu_v3_32.gin is 32 cores: a v3-32). --stop sends
# SIGTERM: the run saves a checkpoint at the current step on every host and exits.
# Settings also come from the environment: TPU_NAME, ZONE, PROJECT, GIN_FILE, WORKDIR.
# --dry-run prints the gcloud commands instead of running them.
set -euo pipefail
# shellcheck source=scripts/tpu/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The shell command that starts bertjax-train on one worker unless it is already running.
start_command() {
  local train
  train="$(printf ' %q' .venv/bin/bertjax-train --distributed --gin_file="$GIN_FILE" \
    --workdir="$WORKDIR" ${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"})"
  echo "cd $REMOTE_DIR || { echo \"\$(hostname): no $REMOTE_DIR: run scripts/tpu/create.sh\" >&2; exit 2; };" \
    "if [ -f $REMOTE_PID ] && kill -0 \"\$(cat $REMOTE_PID)\" 2>/dev/null; then" \
    "echo \"\$(hostname): bertjax-train is already running (pid \$(cat $REMOTE_PID))\" >&2; exit 1; fi;" \
    "setsid nohup$train > $REMOTE_LOG 2>&1 < /dev/null & echo \$! > $REMOTE_PID;" \
    "echo \"\$(hostname): bertjax-train started, pid \$(cat $REMOTE_PID), log $REMOTE_LOG\""
}

stop_command() {
  echo "if [ -f $REMOTE_PID ] && kill -TERM \"\$(cat $REMOTE_PID)\" 2>/dev/null; then" \
    "echo \"\$(hostname): SIGTERM sent; the run checkpoints and exits\"; else" \
    "echo \"\$(hostname): no bertjax-train running\"; fi"
}

main() {
  parse_flags "project zone name gin-file workdir stop" "$@"
  set_location
  if [[ "$STOP" == 1 ]]; then
    on_workers all "$(stop_command)"
    return
  fi
  require GIN_FILE --gin-file
  require WORKDIR --workdir
  [[ "$WORKDIR" == gs://* ]] ||
    die "--workdir=$WORKDIR is not on gs://: every host must write the same checkpoints" \
      "(pass --workdir=gs://BUCKET/RUN)"
  if [[ "$GIN_FILE" != /* && ! -f "$REPO_ROOT/$GIN_FILE" ]]; then
    echo "$(basename "$0"): warning: $GIN_FILE is not in this checkout; the workers must have it" >&2
  fi
  on_workers all "$(start_command)"
}

main "$@"
