# Shared by scripts/tpu/*.sh (sourced, never run): settings from flags or the environment,
# the gcloud options every command takes, and --dry-run, which prints each command (quoted
# so that a shell, or Python's shlex.split, reads it back as the same words) instead of
# running it.
# The settings are read by the scripts that source this file, and the remote paths keep
# their `~` for the worker's shell to expand:
# shellcheck shell=bash disable=SC2034,SC2088

PROJECT="${PROJECT:-}"                     # empty: gcloud's configured project
ZONE="${ZONE:-}"
TPU_NAME="${TPU_NAME:-}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v3-32}"
TPU_VERSION="${TPU_VERSION:-}"             # empty: the runtime for the accelerator type
REPO="${REPO:-}"                           # empty: this checkout's `origin`
REF="${REF:-HEAD}"                         # branch, tag or commit to install
GIN_FILE="${GIN_FILE:-}"
WORKDIR="${WORKDIR:-}"
WORKER="${WORKER:-0}"                      # logs.sh: a worker number, or `all`
DRY_RUN="${DRY_RUN:-0}"
PREEMPTIBLE="${PREEMPTIBLE:-0}"
SKIP_CREATE="${SKIP_CREATE:-0}"
STOP="${STOP:-0}"
EXTRA_ARGS=()                              # after `--`: extra bertjax-train flags
REMOTE_DIR='~/bertjax'                     # on every worker; `~` expands there
REMOTE_LOG='~/bertjax-train.log'
REMOTE_PID='~/bertjax-train.pid'
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

die() {
  echo "$(basename "$0"): error: $*" >&2
  exit 2
}

usage() {
  # The script's header comment, without the `#!` line.
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
}

# parse_flags "ALLOWED FLAG NAMES" "$@": set the settings above from --name=value or
# --name value; anything after `--` goes to EXTRA_ARGS.
parse_flags() {
  local allowed=" $1 " flag value
  shift
  while (($#)); do
    flag="${1%%=*}"
    case "$1" in
      -h | --help) usage; exit 0 ;;
      --) shift; EXTRA_ARGS=("$@"); break ;;
      --dry-run) DRY_RUN=1; shift; continue ;;
      --*) ;;
      *) die "unexpected argument '$1': see --help" ;;
    esac
    [[ "$allowed" == *" ${flag#--} "* ]] || die "unknown flag $flag: see --help"
    case "$flag" in
      --preemptible) PREEMPTIBLE=1; shift; continue ;;
      --skip-create) SKIP_CREATE=1; shift; continue ;;
      --stop) STOP=1; shift; continue ;;
    esac
    if [[ "$1" == *=* ]]; then
      value="${1#*=}"; shift
    else
      (($# >= 2)) || die "$flag needs a value: $flag=VALUE"
      value="$2"; shift 2
    fi
    case "$flag" in
      --project) PROJECT="$value" ;;
      --zone) ZONE="$value" ;;
      --name) TPU_NAME="$value" ;;
      --accelerator-type) ACCELERATOR_TYPE="$value" ;;
      --version) TPU_VERSION="$value" ;;
      --repo) REPO="$value" ;;
      --ref) REF="$value" ;;
      --gin-file) GIN_FILE="$value" ;;
      --workdir) WORKDIR="$value" ;;
      --worker) WORKER="$value" ;;
      *) die "unknown flag $flag: see --help" ;;
    esac
  done
}

# require VAR FLAG: one line naming the flag and the variable when a setting is empty.
require() {
  [[ -n "${!1}" ]] || die "no ${2#--} given: pass $2=... or set $1"
}

# The --zone (and --project) options of every gcloud TPU command.
GCLOUD_LOCATION=()
set_location() {
  require TPU_NAME --name
  require ZONE --zone
  GCLOUD_LOCATION=(--zone="$ZONE")
  if [[ -n "$PROJECT" ]]; then GCLOUD_LOCATION+=(--project="$PROJECT"); fi
}

# show_command WORD...: the command on one line; words with shell syntax in single quotes.
show_command() {
  local word words=()
  for word in "$@"; do
    if [[ "$word" =~ ^[A-Za-z0-9_./:=@,+%-]+$ ]]; then words+=("$word"); else words+=("${word@Q}"); fi
  done
  echo "${words[*]}"
}

# run WORD...: print the command with --dry-run, else echo it to stderr and run it.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    show_command "$@"
  else
    echo "+ $(show_command "$@")" >&2
    "$@"
  fi
}

# on_workers WORKERS COMMAND: COMMAND in a shell on the given workers of the slice (`all`
# runs it on every host at once, as a multi-host JAX program needs).
on_workers() {
  run gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_LOCATION[@]}" --worker="$1" \
    --command="$2"
}
