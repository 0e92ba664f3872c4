"""`make bench`: every benchmark's claim, each in its own process, written to results.md.

Each benchmark runs as `python benchmarks/NAME.py ARGS` (the command its README section gives
for the claim), so every peer is measured side by side with bertjax in that one process. This
script adds what makes the figures comparable across runs: the machine (CPU, cores, memory,
library versions, commit), the date, and the load average before and after each benchmark,
flagged when it is above the core count (the ratios are then not a claim).

    python benchmarks/run_all.py                          # all claims -> benchmarks/results.md
    python benchmarks/run_all.py --only=elmo_lstm,pretraining_pipeline
    python benchmarks/run_all.py --quick --out=/tmp/results.md   # small sizes, a smoke test

A run in which any benchmark fails leaves an existing results file as it was and writes
`<out>.partial` beside it instead, with the failure recorded.
"""

import argparse
import dataclasses
import datetime
import importlib.metadata
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
RATIO = re.compile(r"\d+\.\d+x")


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
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    p.add_argument("--quick", action="store_true", help="each benchmark's small smoke sizes")
    p.add_argument("--out", default=str(HERE / "results.md"), help="the results file")
    p.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per benchmark")
    args = p.parse_args(argv)
    known = {claim.name for claim in CLAIMS}
    args.only = [name for name in args.only.split(",") if name]
    unknown = sorted(set(args.only) - known)
    if unknown:
        p.error(f"--only names {', '.join(unknown)}, which is not a benchmark; "
                f"choose from {', '.join(sorted(known))}")
    return args


def load_average() -> float:
    return os.getloadavg()[0]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine() -> list[str]:
    """Markdown lines describing where the figures were taken."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    memory = "unknown"
    meminfo = pathlib.Path("/proc/meminfo")
    if meminfo.is_file():
        total_kib = int(meminfo.read_text().split("MemTotal:")[1].split()[0])
        memory = f"{total_kib / 2**20:.1f} GiB"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    versions = ", ".join(f"{p} {_version(p)}" for p in
                         ("jax", "flax", "torch", "transformers", "numpy", "tensorflow"))
    return [f"- CPU: {cpu}, {os.cpu_count()} cores; memory {memory}",
            f"- Python {platform.python_version()} on {platform.platform()}",
            f"- {versions}", f"- bertjax commit {commit}"]


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
    def ratios(self) -> list[str]:
        return [line.strip() for line in self.stdout.splitlines() if RATIO.search(line)]


def run(claim: Claim, quick: bool, timeout: float) -> Outcome:
    command = [sys.executable, f"benchmarks/{claim.name}.py",
               *(claim.quick_args if quick else claim.args)]
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


def report(outcomes: list[Outcome], quick: bool, started: datetime.datetime) -> str:
    cores = os.cpu_count() or 1
    lines = ["# Benchmark results", "",
             f"Written by `python benchmarks/run_all.py{' --quick' if quick else ''}` on "
             f"{started:%Y-%m-%d %H:%M} UTC. Each row is one process timing bertjax and its peer "
             "side by side; the sections below hold each benchmark's own table.", ""]
    if quick:
        lines += ["**Quick mode: smoke-test sizes, not a claim.**", ""]
    lines += ["## Machine", "", *machine(), ""]
    busy = [o for o in outcomes if max(o.load_before, o.load_after) > cores]
    if busy:
        lines += [f"**Warning:** the load average was above the {cores} cores during "
                  f"{', '.join(o.claim.name for o in busy)}; those ratios are not a claim.", ""]
    lines += ["## Summary", "", "| benchmark | ratios printed | load before / after | wall s |",
              "|---|---|---|---|"]
    for o in outcomes:
        ratios = "<br>".join(o.ratios) if o.returncode == 0 else f"FAILED (exit {o.returncode})"
        lines.append(f"| {o.claim.what} | {ratios.replace('|', '/')} | "
                     f"{o.load_before:.1f} / {o.load_after:.1f} | {o.seconds:.0f} |")
    for o in outcomes:
        relative = " ".join(["python", *o.command[1:]])
        lines += ["", f"## {o.claim.name}", "", f"`XLA_FLAGS= {relative}`", "", "```",
                  o.stdout.rstrip() or "(no output)", "```"]
        if o.returncode != 0:
            lines += ["", f"Failed with exit {o.returncode}; the end of its stderr:", "", "```",
                      o.stderr.rstrip()[-2000:], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    claims = [c for c in CLAIMS if not args.only or c.name in args.only]
    cores = os.cpu_count() or 1
    load = load_average()
    if load > cores:
        print(f"run_all: warning: load average {load:.1f} is above the {cores} cores; "
              "the ratios will be flagged as unreliable (measure on an idle machine)",
              file=sys.stderr)
    started = datetime.datetime.now(datetime.UTC)
    outcomes = []
    for claim in claims:
        print(f"run_all: {claim.name} ...", flush=True)
        outcome = run(claim, args.quick, args.timeout)
        outcomes.append(outcome)
        for line in outcome.ratios if outcome.returncode == 0 else ["FAILED"]:
            print(f"  {line}", flush=True)
    out = pathlib.Path(args.out)
    failed = [o.claim.name for o in outcomes if o.returncode != 0]
    target = out.with_name(out.name + ".partial") if failed else out
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(target.name + ".tmp")
    scratch.write_text(report(outcomes, args.quick, started), encoding="utf-8")
    scratch.replace(target)
    if failed:
        print(f"run_all: error: {', '.join(failed)} failed; {out} is left as it was and this "
              f"run is in {target}", file=sys.stderr)
        return 1
    print(f"run_all: wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
