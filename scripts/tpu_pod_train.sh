#!/usr/bin/env bash
# Train on a Cloud TPU VM slice: install bertjax on every host, then start the same command on
# all of them; `--distributed` makes JAX find its peers.
#
#   REPO=<git url> TPU=my-v3-32 ZONE=europe-west4-a WORKDIR=gs://bucket/bert_base \
#     scripts/tpu_pod_train.sh configs/experiments/bert_base_tpu_v3_32.gin [--gin.X=Y ...]
set -euo pipefail
: "${TPU:?set TPU to the TPU VM name}" "${ZONE:?set ZONE}" "${WORKDIR:?set WORKDIR (gs://...)}"
GIN_FILE="${1:?usage: $0 GIN_FILE [extra bertjax-train flags]}"; shift
: "${REPO:?set REPO to the git URL of your bertjax checkout}"
EXTRA="$(printf ' %q' "$@")"

on_all_hosts() {
  gcloud compute tpus tpu-vm ssh "$TPU" --zone="$ZONE" --worker=all --command="$1"
}

on_all_hosts "test -d bertjax || git clone -q $REPO bertjax; cd bertjax && git pull -q && \
  python3 -m venv .venv && .venv/bin/pip install -q -e '.[tpu]'"
on_all_hosts "cd bertjax && .venv/bin/bertjax-train --distributed --gin_file=$GIN_FILE \
  --workdir=$WORKDIR $EXTRA"
