#!/usr/bin/env bash
# Delete a TPU VM slice (billing stops; checkpoints on gs:// stay).
#
#   scripts/tpu/delete.sh --name=bert-v3-32 --zone=europe-west4-a [--project=P]
#
# Settings also come from the environment: TPU_NAME, ZONE, PROJECT. --dry-run prints the
# gcloud command instead of running it.
set -euo pipefail
# shellcheck source=scripts/tpu/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

main() {
  parse_flags "project zone name" "$@"
  set_location
  run gcloud compute tpus tpu-vm delete "$TPU_NAME" "${GCLOUD_LOCATION[@]}" --quiet
}

main "$@"
