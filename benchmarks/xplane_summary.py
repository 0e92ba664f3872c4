"""Where a profiled step spends its device time: the XLA ops of a jax.profiler trace, summed by
what they compute and by where in the model they come from.

    python benchmarks/xplane_summary.py TRACE [--hlo=STEP.hlo.txt] [--steps=N] [--top=25]

TRACE is what `jax.profiler` writes: `*.trace.json.gz` (read with the standard library, so
this runs on an accelerator host without TensorFlow) or `*.xplane.pb[.gz]` (TensorFlow's
protocol buffer module). Each executed XLA op is one event carrying its HLO instruction
(`hlo_op`): on GPUs the device's kernel events, on the CPU the events of XLA's threads.

Two tables:

- **by kind**: matrix products, fused attention kernels, copies and transposes, collectives,
  the other fusions (elementwise work and reductions). From the op and kernel names alone.
- **by name stack** (with `--hlo`, the compiled step's HLO text, `compiled.as_text()`): each op
  is traced back to the JAX name stack of its instruction (`metadata={op_name=...}`; a fusion
  by its own, else by the most frequent of its fused instructions'), which names the flax
  module and JAX function it came from, and is put under one heading: optimizer update,
  non-finite guard, dropout (and its random bits), LayerNorm, GELU, attention's softmax and
  masks, loss and softmax, embeddings, or the matrix products and fused attention kernels
  wherever they are. Each row gives its share of device time, ms per step, op executions per
  step, and whether its ops run once per layer (the stack holds `layer_N` or a scanned
  `layers`) or once per step: the per-layer rows are what a change to the Transformer block
  moves, the per-step rows what the optimizer and loss cost.

Steps are counted from the trace (distinct `run_id`s of the busiest module) unless `--steps`
says how many the trace holds.
"""

import argparse
import collections
import dataclasses
import gzip
import json
import re

KINDS = (  # first match wins
    ("attention (fused kernel)", re.compile(r"cudnn|fmha|flash|splash", re.I)),
    ("matrix products", re.compile(r"gemm|cublas|nvjet|cutlass|xmma|dot|matmul|convolution",
                                   re.I)),
    ("copies / transposes", re.compile(r"copy|transpose|memcpy|memset", re.I)),
    ("collectives", re.compile(r"all-reduce|all-gather|reduce-scatter|collective|nccl", re.I)),
    ("reductions / elementwise fusions", re.compile(r"fusion|reduce|loop|input", re.I)),
)

# Headings of the name-stack table, first match wins: (heading, test on (name stack, kind)).
REGIONS = (
    ("attention kernels (fused)", lambda stack, kind: kind == "attention (fused kernel)"),
    ("matrix products", lambda stack, kind: kind == "matrix products"),
    ("optimizer update", lambda stack, kind: "/optimizer" in stack),
    ("non-finite guard", lambda stack, kind: "/nonfinite_guard" in stack),
    ("dropout and its random bits", lambda stack, kind: re.search(
        r"/dropout|threefry|random_bits|rng_bit_generator|random_wrap", stack, re.I) is not None),
    ("LayerNorm", lambda stack, kind: "layer_norm" in stack),
    ("GELU", lambda stack, kind: re.search(r"gelu|/mlp/.*(erf|tanh)", stack) is not None),
    ("attention: softmax, masks, reshapes", lambda stack, kind: "/attention" in stack),
    ("loss and softmax", lambda stack, kind: re.search(
        r"cross_entropy|softmax|log_softmax|logsumexp|xent|_loss", stack) is not None),
    ("embeddings", lambda stack, kind: "embeddings" in stack),
    ("copies / transposes", lambda stack, kind: kind == "copies / transposes"),
    ("collectives", lambda stack, kind: kind == "collectives"),
    ("other", lambda stack, kind: True),
)
PER_LAYER = re.compile(r"/layer_\d+/|/layers/")


@dataclasses.dataclass
class OpEvent:
    """One executed XLA op: its HLO instruction, the kernel's (or event's) name, picoseconds,
    and the run it belongs to (a step), where the trace says."""

    hlo_op: str
    name: str
    ps: int
    module: str = ""
    run_id: str = ""


# ----------------------------------------------------------------------------- traces


def load_events(path: str) -> list[OpEvent]:
    """The op events of a trace file (`*.trace.json.gz` or `*.xplane.pb[.gz]`)."""
    if path.endswith(".json.gz") or path.endswith(".json"):
        return json_events(path)
    return xplane_events(load_space(path))


def json_events(path: str) -> list[OpEvent]:
    """Chrome-trace events that carry an `hlo_op`; on the device's own processes where the
    trace has any (GPU kernels), else on any (XLA:CPU's threads)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    names = {e["pid"]: e["args"].get("name", "") for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    ops = [e for e in trace["traceEvents"]
           if e.get("ph") == "X" and "hlo_op" in e.get("args", {})]
    on_device = [e for e in ops if names.get(e["pid"], "").startswith("/device:")]
    return [OpEvent(e["args"]["hlo_op"], e.get("name", ""), int(round(e["dur"] * 1e6)),
                    e["args"].get("hlo_module", ""), str(e["args"].get("run_id", "")))
            for e in (on_device or ops)]


def load_space(path: str):  # noqa: ANN201 (a TensorFlow protocol buffer)
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        space = xplane_pb2.XSpace()
        space.ParseFromString(f.read())
    return space


def xplane_events(space) -> list[OpEvent]:  # noqa: ANN001
    """The device planes' op events: their "XLA Ops" line where there is one (else every line
    but "XLA Modules"), each event's `hlo_op` stat where it has one, else its name."""
    events = []
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        lines = [line for line in plane.lines if line.name == "XLA Ops"] or [
            line for line in plane.lines if line.name != "XLA Modules"]
        for line in lines:
            for event in line.events:
                metadata = plane.event_metadata[event.metadata_id]
                stats = {}
                for stat in [*metadata.stats, *event.stats]:
                    value = stat.str_value or (stat_names.get(stat.ref_value, "")
                                               if stat.ref_value else str(stat.int64_value))
                    stats[stat_names.get(stat.metadata_id, "")] = value
                events.append(OpEvent(stats.get("hlo_op") or metadata.name, metadata.name,
                                      event.duration_ps, stats.get("hlo_module", ""),
                                      stats.get("run_id", "")))
    return events


def op_times(space) -> collections.Counter:  # noqa: ANN001
    """Picoseconds per op name over the device planes' XLA op lines."""
    totals: collections.Counter = collections.Counter()
    for event in xplane_events(space):
        totals[event.name] += event.ps
    return totals


# ----------------------------------------------------------------------------- HLO


@dataclasses.dataclass
class Instruction:
    name: str
    opcode: str
    op_name: str
    calls: str = ""
    target: str = ""  # a custom call's target


_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+) = (?P<type>.*?) "
                          r"(?P<opcode>[\w\-]+)\(")
_OP_NAME = re.compile(r'op_name="(?P<op_name>[^"]*)"')
_CALLS = re.compile(r"calls=%?(?P<calls>[\w.\-]+)")
_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]*)"')
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+) .*\{\s*$")


def parse_hlo(text: str) -> tuple[dict[str, Instruction], dict[str, list[Instruction]]]:
    """(instructions by name, instructions of each computation) of an HLO module's text."""
    instructions: dict[str, Instruction] = {}
    computations: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    for line in text.splitlines():
        start = _COMPUTATION.match(line)
        if start and "=" not in line.split("{")[0].split("(")[0]:
            current = computations.setdefault(start.group("name"), [])
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        op_name = _OP_NAME.search(line)
        calls, target = _CALLS.search(line), _TARGET.search(line)
        inst = Instruction(match.group("name"), match.group("opcode"),
                           op_name.group("op_name") if op_name else "",
                           calls.group("calls") if calls else "",
                           target.group("target") if target else "")
        instructions[inst.name] = inst
        if current is not None:
            current.append(inst)
    return instructions, computations


def name_stack(inst: Instruction, computations: dict[str, list[Instruction]]) -> str:
    """The instruction's JAX name stack; for a fusion without one, the most frequent stack
    of its fused instructions (nested fusions and calls followed)."""
    if inst.op_name:
        return inst.op_name
    counts: collections.Counter = collections.Counter()
    pending, seen = [inst.calls], set()
    while pending:
        computation = pending.pop()
        if not computation or computation in seen:
            continue
        seen.add(computation)
        for inner in computations.get(computation, ()):
            if inner.op_name:
                counts[inner.op_name] += 1
            pending.append(inner.calls)
    return counts.most_common(1)[0][0] if counts else ""


def instruction_kind(inst: Instruction | None, event_name: str,
                     computations: dict[str, list[Instruction]]) -> str:
    """What an op computes, from its kernel name and, where known, its HLO instruction."""
    if inst is not None:
        if re.search(r"cudnn.*(fmha|flash|attention)|fmha", inst.target, re.I):
            return "attention (fused kernel)"
        if inst.opcode in ("dot", "convolution") or re.search(r"gemm|matmul|blas", inst.target,
                                                              re.I):
            return "matrix products"
        if inst.opcode == "fusion" and any(inner.opcode in ("dot", "convolution") for inner in
                                           computations.get(inst.calls, ())):
            return "matrix products"
        if inst.opcode in ("copy", "transpose", "copy-start", "copy-done"):
            return "copies / transposes"
    return kind_of(event_name or (inst.name if inst else ""))


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


# ----------------------------------------------------------------------------- tables


def count_steps(events: list[OpEvent]) -> int:
    """Distinct run ids of the module with the most device time (1 where the trace has none)."""
    by_module: collections.Counter = collections.Counter()
    for event in events:
        by_module[event.module] += event.ps
    if not by_module:
        return 1
    main = by_module.most_common(1)[0][0]
    runs = {e.run_id for e in events if e.module == main and e.run_id}
    return max(1, len(runs))


def kind_table(events: list[OpEvent], top: int) -> str:
    totals: collections.Counter = collections.Counter()
    for event in events:
        totals[event.name] += event.ps
    return summary(totals, top)


def summary(totals: collections.Counter, top: int) -> str:
    total = sum(totals.values())
    if not total:
        return "no device ops in this trace"
    by_kind: collections.Counter = collections.Counter()
    for name, ps in totals.items():
        by_kind[kind_of(name)] += ps
    lines = [f"device time {total / 1e9:.2f} ms over {len(totals)} distinct ops", "",
             "by kind:"]
    lines += [f"  {100 * ps / total:5.1f}%  {ps / 1e9:9.3f} ms  {kind}"
              for kind, ps in by_kind.most_common()]
    lines += ["", f"top {top} ops:"]
    lines += [f"  {100 * ps / total:5.1f}%  {ps / 1e9:9.3f} ms  {name[:100]}"
              for name, ps in totals.most_common(top)]
    return "\n".join(lines)


@dataclasses.dataclass
class Region:
    ps: int = 0
    events: int = 0
    per_layer_ps: int = 0
    per_layer_events: int = 0


def region_of(stack: str, kind: str) -> str:
    """The REGIONS heading of an op from its name stack and kind."""
    return next(heading for heading, test in REGIONS if test(stack, kind))


def attribute(events: list[OpEvent], hlo_text: str) -> tuple[dict[str, Region], int]:
    """Device time by name-stack heading (REGIONS), and the picoseconds of ops the HLO text
    does not hold (another program's, e.g. the initialisation)."""
    instructions, computations = parse_hlo(hlo_text)
    by_kernel_name = {_kernel_name(name): inst for name, inst in instructions.items()}
    regions: dict[str, Region] = {heading: Region() for heading, _ in REGIONS}
    unmatched = 0
    for event in events:
        inst = (instructions.get(event.hlo_op) or by_kernel_name.get(_kernel_name(event.hlo_op))
                or by_kernel_name.get(_kernel_name(event.name)))
        if inst is None:
            unmatched += event.ps
            continue
        stack = name_stack(inst, computations)
        kind = instruction_kind(inst, event.name, computations)
        heading = region_of(stack, kind)
        region = regions[heading]
        region.ps += event.ps
        region.events += 1
        if PER_LAYER.search(stack):
            region.per_layer_ps += event.ps
            region.per_layer_events += 1
    return regions, unmatched


def _kernel_name(name: str) -> str:
    """An HLO instruction's name as XLA:GPU names the kernel it emits (`loop_add_fusion.7` runs
    as `loop_add_fusion_7`): a trace whose `hlo_op` is not the instruction's own name is still
    matched by its kernel's name."""
    return re.sub(r"[^0-9A-Za-z_]", "_", name.rsplit("/", 1)[-1].lstrip("%"))


def region_table(regions: dict[str, Region], steps: int, unmatched: int) -> str:
    total = sum(r.ps for r in regions.values())
    if not total:
        return "no op of this trace is in the HLO text: give the step's own --hlo"
    lines = [f"by name stack ({steps} step(s); per layer: the share of the row's time in ops "
             "under a layer_N or scanned layers scope):",
             "| where | share | ms/step | ops/step | per layer |", "|---|---|---|---|---|"]
    for heading, region in sorted(regions.items(), key=lambda kv: -kv[1].ps):
        if not region.ps:
            continue
        lines.append(f"| {heading} | {100 * region.ps / total:.1f}% | "
                     f"{region.ps / 1e9 / steps:.3f} | {region.events / steps:.0f} | "
                     f"{100 * region.per_layer_ps / region.ps:.0f}% |")
    if unmatched:
        lines.append(f"(+{unmatched / 1e9:.2f} ms in ops of other programs, not counted)")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("--hlo", default=None, help="the profiled step's compiled HLO text")
    p.add_argument("--steps", type=int, default=None, help="steps the trace holds")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    events = load_events(args.trace)
    print(kind_table(events, args.top))
    if args.hlo:
        with open(args.hlo) as f:
            regions, unmatched = attribute(events, f.read())
        print()
        print(region_table(regions, args.steps or count_steps(events), unmatched))


if __name__ == "__main__":
    main()
