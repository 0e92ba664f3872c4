#!/usr/bin/env bash
# Follow the training log of a TPU VM slice (worker 0's by default: it prints the progress
# bar and metrics; the others print start-up lines and errors).
#
#   scripts/tpu/logs.sh --name=bert-v3-32 --zone=europe-west4-a [--worker=0|N|all] [--project=P]
#
# Ctrl-C stops following; the run goes on. Settings also come from the environment:
# TPU_NAME, ZONE, PROJECT, WORKER. --dry-run prints the gcloud command instead of running it.
set -euo pipefail
# shellcheck source=scripts/tpu/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

main() {
  parse_flags "project zone name worker" "$@"
  set_location
  [[ "$WORKER" == all || "$WORKER" =~ ^[0-9]+$ ]] || die "--worker=$WORKER: pass a number or all"
  on_workers "$WORKER" "tail -n 200 -F $REMOTE_LOG"
}

main "$@"
