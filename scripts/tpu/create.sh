#!/usr/bin/env bash
# Create a Cloud TPU VM slice and install bertjax on every worker (host) of it.
#
#   scripts/tpu/create.sh --name=bert-v3-32 --zone=europe-west4-a --accelerator-type=v3-32 \
#       [--project=P] [--version=RUNTIME] [--preemptible] [--repo=GIT_URL] [--ref=BRANCH]
#   scripts/tpu/create.sh --name=bert-v3-32 --zone=europe-west4-a --skip-create  # reinstall
#
# Each worker gets Python 3.11 (bertjax needs >= 3.11; the TPU image has 3.10), a clone of
# --repo at --ref in ~/bertjax and `pip install -e '.[tpu]'` in ~/bertjax/.venv. The runtime
# --version defaults to the one Google lists for the accelerator: tpu-ubuntu2204-base for
# v2/v3/v4, v2-alpha-tpuv5-lite (v5e), v2-alpha-tpuv5 (v5p), v2-alpha-tpuv6e (v6e).
# Settings also come from the environment: TPU_NAME, ZONE, PROJECT, ACCELERATOR_TYPE,
# TPU_VERSION, REPO, REF. --dry-run prints the gcloud commands instead of running them.
set -euo pipefail
# shellcheck source=scripts/tpu/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The runtime image Google documents for a TPU generation (for JAX and PyTorch).
default_version() {
  case "$1" in
    v2-* | v3-* | v4-*) echo tpu-ubuntu2204-base ;;
    v5litepod-* | v5e-*) echo v2-alpha-tpuv5-lite ;;
    v5p-*) echo v2-alpha-tpuv5 ;;
    v6e-*) echo v2-alpha-tpuv6e ;;
    *) die "no runtime known for --accelerator-type=$1: pass --version=RUNTIME" ;;
  esac
}

# The shell command that installs (or updates) bertjax on one worker; safe to rerun.
install_command() {
  local repo ref
  repo="$(printf '%q' "$REPO")"
  ref="$(printf '%q' "$REF")"
  echo "set -e; command -v python3.11 >/dev/null || { sudo apt-get -qq update &&" \
    "sudo DEBIAN_FRONTEND=noninteractive apt-get -qq install -y python3.11 python3.11-venv; };" \
    "test -d $REMOTE_DIR || git clone -q $repo $REMOTE_DIR; cd $REMOTE_DIR;" \
    "git fetch -q origin $ref; git checkout -q --detach FETCH_HEAD;" \
    "test -x .venv/bin/pip || python3.11 -m venv .venv; .venv/bin/pip install -q -U pip;" \
    ".venv/bin/pip install -q -e '.[tpu]'; echo \"\$(hostname): bertjax \$(git rev-parse --short HEAD)\""
}

main() {
  parse_flags "project zone name accelerator-type version repo ref preemptible skip-create" "$@"
  set_location
  [[ "$ACCELERATOR_TYPE" =~ ^v[0-9][a-z0-9]*-[0-9]+$ ]] ||
    die "--accelerator-type=$ACCELERATOR_TYPE is not a TPU type such as v3-32 or v5litepod-16"
  if [[ -z "$REPO" ]]; then
    REPO="$(git -C "$REPO_ROOT" remote get-url origin 2>/dev/null)" ||
      die "no repository to install: pass --repo=GIT_URL (one every worker can clone) or set REPO"
  fi
  local version="$TPU_VERSION"
  if [[ -z "$version" ]]; then version="$(default_version "$ACCELERATOR_TYPE")"; fi
  if [[ "$SKIP_CREATE" != 1 ]]; then
    local create=(gcloud compute tpus tpu-vm create "$TPU_NAME" "${GCLOUD_LOCATION[@]}"
      --accelerator-type="$ACCELERATOR_TYPE" --version="$version")
    if [[ "$PREEMPTIBLE" == 1 ]]; then create+=(--preemptible); fi
    run "${create[@]}"
  fi
  on_workers all "$(install_command)"
}

main "$@"
