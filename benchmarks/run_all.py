"""`make bench`: every benchmark's claim, each in its own process, appended to the record.

Each benchmark runs as `python benchmarks/NAME.py ARGS` (the command its README section gives
for the claim), so every peer is measured side by side with bertjax in that one process. Each
benchmark's run is appended to results.jsonl as one line (results_record.py's format) with
what makes the figures comparable across runs: the machine (CPU, cores, vector instructions,
memory), library versions, commit, date, the load average before and after (a run is "loaded"
when it was above the core count), every ratio the benchmark printed, what its output says
differs between the sides, and its whole output. results.md is then rendered from the record.
Earlier runs are never rewritten; a failed benchmark is recorded as failed, without ratios.

    python benchmarks/run_all.py                          # all claims -> benchmarks/results.jsonl
    python benchmarks/run_all.py --only=elmo_lstm,pretraining_pipeline
    python benchmarks/run_all.py --quick --out=/tmp/results.jsonl   # small sizes, a smoke test
    python benchmarks/run_all.py --only=time_to_quality --args='--rows=run_clm,gpt_same_recipe'

A benchmark reports a ratio with a line `ratio MEASURE: 1.23x`, and what it does differently on
the two sides under a line starting `what differs`, one `  - ` line each.
"""

import argparse
import dataclasses
import datetime
import importlib.metadata
import os
import pathlib
import platform
import re
import shlex
import subprocess
import sys
import time

import results_record

HERE = pathlib.Path(__file__).resolve().parent
RATIO_LINE = re.compile(r"^\s*ratio (?P<measure>.+?): (?P<value>\d+(?:\.\d+)?)x\b")
# finetune_classification.py's wording: "bertjax is 1.75x faster than transformers (...)"
FASTER_LINE = re.compile(r"^\s*bertjax is (?P<value>\d+\.\d+)x faster(?: than (?P<peer>\S+))?")


@dataclasses.dataclass(frozen=True)
class Claim:
    name: str  # the script, benchmarks/NAME.py
    what: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...]


CLAIMS = (
    Claim("bert_pretraining_step", "BERT-base pretraining step (8 x 128, AdamW) vs transformers",
          ("--size=base",), ("--size=tiny", "--steps=2", "--warmup=1", "--matmul_size=256")),
    Claim("gpt2_step_and_generate", "GPT-2 small train step and greedy generation vs "
          "transformers", ("--size=gpt2_small",),
          ("--size=gpt2_small", "--steps=1", "--new_tokens=8", "--prompt_len=8",
           "--gen_batches=1", "--repeats=1")),
    Claim("elmo_lstm", "ELMo-original LSTM layer, forward + backward, vs torch.nn.LSTM",
          (), ("--quick",)),
    Claim("elmo_bilm_step", "ELMo biLM train step vs a torch biLM", ("--size=small",),
          ("--size=tiny", "--steps=2", "--rounds=1", "--warmup=1")),
    Claim("pretraining_pipeline", "BERT pretraining examples/s (seq 128) against the 8,000/s "
          "target", (), ("--quick",)),
    Claim("finetune_classification", "fine-tuning a sentence classifier vs transformers",
          (), ("--quick",)),
    Claim("packing", "packed against unpacked BERT pretraining on real text (real tokens/s)",
          (), ("--quick",)),
    Claim("token_store", "a run's start-up and peak memory on a token store vs on text, and "
          "the store's build speed and resume (BERT, GPT, ELMo; 10, 100, 1,000 MB)",
          ("--families=bert,gpt,elmo", "--sizes=10,100,1000"), ("--quick",)),
    Claim("time_to_quality", "pretraining to transformers' run_mlm / run_clm final held-out "
          "loss, wall time, 600 s a row", (), ("--quick",)),
    Claim("host_memory", "a CPU GPT-2 tiny train step, malloc keeping freed memory against "
          "glibc's default", (), ("--quick",)),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="each benchmark's small smoke sizes (needs --out: not a measurement)")
    p.add_argument("--out", default=str(results_record.RESULTS),
                   help="the record (a .jsonl file; its .md is rendered beside it)")
    p.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per benchmark")
    p.add_argument("--args", default="",
                   help="more arguments for the one benchmark --only names (e.g. "
                        "--args='--rows=run_clm,gpt_same_recipe'); recorded with the run")
    args = p.parse_args(argv)
    known = {claim.name for claim in CLAIMS}
    args.only = [name for name in args.only.split(",") if name]
    unknown = sorted(set(args.only) - known)
    if unknown:
        p.error(f"--only names {', '.join(unknown)}, which is not a benchmark; "
                f"choose from {', '.join(sorted(known))}")
    if args.quick and pathlib.Path(args.out).resolve() == results_record.RESULTS:
        p.error("--quick sizes measure nothing: pass --out=FILE (e.g. /tmp/results.jsonl) so "
                "benchmarks/results.jsonl keeps only real runs")
    if args.args and len(args.only) != 1:
        p.error("--args are one benchmark's arguments: name that benchmark alone with --only")
    if not args.out.endswith(".jsonl"):
        p.error(f"--out={args.out} is not a .jsonl record: pass one (e.g. "
                "/tmp/results.jsonl); its .md is rendered beside it")
    return args


def load_average() -> float:
    return os.getloadavg()[0]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpu_facts() -> tuple[str, str]:
    """(the CPU's model name, its widest vector instructions) from /proc/cpuinfo."""
    cpu, vector = platform.processor() or platform.machine(), "unknown"
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        lines = cpuinfo.read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        flags = next((line.split(":", 1)[1].split() for line in lines
                      if line.startswith("flags")), [])
        cpu = names[0] if names else cpu
        vector = ("AVX-512" + (" with BF16" if "avx512_bf16" in flags else "")
                  if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2")
    return cpu, vector


def machine_fields() -> dict[str, str]:
    """The run-section lines that say where and with what the figures were taken."""
    cpu, vector = cpu_facts()
    memory = "unknown"
    meminfo = pathlib.Path("/proc/meminfo")
    if meminfo.is_file():
        total_kib = int(meminfo.read_text().split("MemTotal:")[1].split()[0])
        memory = f"{total_kib / 2**20:.1f} GiB"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "bertjax", "benchmarks"],
                           cwd=HERE, capture_output=True, text=True).stdout.strip()
    versions = ", ".join(f"{p} {_version(p)}" for p in
                         ("jax", "flax", "torch", "transformers", "numpy", "tensorflow"))
    return {"machine": f"{cpu}, {os.cpu_count()} cores",
            "host": f"{vector}; memory {memory}; Python {platform.python_version()} on "
                    f"{platform.platform()}",
            "versions": versions,
            "commit": commit + (" with uncommitted changes" if dirty else "")}


@dataclasses.dataclass
class Outcome:
    claim: Claim
    command: list[str]
    returncode: int
    seconds: float
    load_before: float
    load_after: float
    stdout: str
    stderr: str

    @property
    def ratios(self) -> list[tuple[str, float]]:
        """(measure, ratio) of every ratio line the benchmark printed."""
        found = []
        for line in self.stdout.splitlines():
            if match := RATIO_LINE.match(line):
                found.append((match["measure"].strip(), float(match["value"])))
            elif match := FASTER_LINE.match(line):
                peer = match["peer"] or "transformers"
                found.append((f"bertjax/{peer} (wall-time speed)", float(match["value"])))
        return found

    @property
    def differences(self) -> list[str]:
        """The `  - ` lines under the benchmark's `what differs ...` line."""
        lines, inside = [], False
        for line in self.stdout.splitlines():
            if line.strip().lower().startswith("what differs"):
                inside = True
            elif inside and line.lstrip().startswith("- "):
                lines.append(line.strip()[2:])
            elif inside:
                inside = False
        return lines

    @property
    def loaded(self) -> bool:
        cores = os.cpu_count() or 1
        warned = any("WARNING" in line and "load" in line for line in self.stdout.splitlines())
        return max(self.load_before, self.load_after) > cores or warned


def run(claim: Claim, quick: bool, timeout: float, extra: str = "") -> Outcome:
    command = [sys.executable, f"benchmarks/{claim.name}.py",
               *(claim.quick_args if quick else claim.args), *shlex.split(extra)]
    env = {**os.environ, "XLA_FLAGS": ""}  # the tests' fake devices would split the CPU
    before, start = load_average(), time.perf_counter()
    try:
        result = subprocess.run(command, cwd=HERE.parent, env=env, capture_output=True,
                                text=True, timeout=timeout)
        code, stdout, stderr = result.returncode, result.stdout, result.stderr
    except subprocess.TimeoutExpired as err:
        code, stdout, stderr = -1, err.stdout or "", f"timed out after {timeout:.0f} s"
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
    return Outcome(claim, command, code, time.perf_counter() - start, before, load_average(),
                   stdout, stderr)


def record(outcome: Outcome, quick: bool, started: datetime.datetime,
           machine: dict[str, str]) -> results_record.Run:
    """The record of one benchmark's run."""
    cores = os.cpu_count() or 1
    args = " ".join(outcome.command[2:])
    if outcome.returncode != 0:
        conditions = f"failed (exit {outcome.returncode})"
    elif outcome.loaded:
        conditions = "loaded (1-minute load average above the core count, or the benchmark " \
                     "warned of load)"
    else:
        conditions = "idle"
    fields = {"benchmark": f"{outcome.claim.name} {args}".strip(),
              "date": f"{started:%Y-%m-%d %H:%M} UTC",
              "machine": machine["machine"], "conditions": conditions,
              **{key: value for key, value in machine.items() if key != "machine"},
              "load": f"{outcome.load_before:.1f} before / {outcome.load_after:.1f} after "
                      f"(1-minute average, {cores} cores)",
              "command": f"`XLA_FLAGS= python benchmarks/{outcome.claim.name}.py"
                         f"{' ' + args if args else ''}`",
              "wall": f"{outcome.seconds:.0f} s"}
    if quick:
        fields["conditions"] += "; quick mode: smoke-test sizes, not a measurement"
    body = []
    if outcome.differences:
        body += ["What differs between the sides (from the benchmark's output):", ""]
        body += [f"- {line}" for line in outcome.differences] + [""]
    body += ["```", outcome.stdout.rstrip() or "(no output)", "```"]
    if outcome.returncode != 0:
        body += ["", f"Failed with exit {outcome.returncode}; the end of its stderr:", "",
                 "```", outcome.stderr.rstrip()[-2000:], "```"]
    ratios = () if outcome.returncode != 0 else tuple(outcome.ratios)
    return results_record.Run(fields, ratios, "\n".join(body))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    claims = [c for c in CLAIMS if not args.only or c.name in args.only]
    cores = os.cpu_count() or 1
    load = load_average()
    if load > cores:
        print(f"run_all: warning: load average {load:.1f} is above the {cores} cores; "
              "the runs will be recorded as loaded (measure on an idle machine)",
              file=sys.stderr)
    started = datetime.datetime.now(datetime.UTC)
    machine = machine_fields()
    out = pathlib.Path(args.out)
    failed = []
    for claim in claims:
        print(f"run_all: {claim.name} ...", flush=True)
        outcome = run(claim, args.quick, args.timeout, args.args)
        if outcome.returncode != 0:
            print(f"  FAILED (exit {outcome.returncode})", flush=True)
        for measure, value in outcome.ratios if outcome.returncode == 0 else []:
            print(f"  {measure}: {value:.2f}x", flush=True)
        results_record.append(out, [record(outcome, args.quick, started, machine)])
        if outcome.returncode != 0:
            failed.append(claim.name)
    if failed:
        print(f"run_all: error: {', '.join(failed)} failed (recorded as failed in {out})",
              file=sys.stderr)
        return 1
    print(f"run_all: appended {len(claims)} run(s) to {out} and rendered "
          f"{results_record.markdown_path(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
