"""Where a profiled step spends its device time: the XLA ops of a jax.profiler trace, summed.

    python benchmarks/xplane_summary.py TRACE.xplane.pb[.gz] [--top=25]

Reads the XPlane protocol buffer `jax.profiler` writes (gzipped or not), takes the device
planes' "XLA Ops" lines (one event per executed op), and prints the total device time, the
share of each kind of op (matrix products, attention kernels, fusions of elementwise work,
copies, collectives, the rest) and the ops that took longest. The proto module comes from
TensorFlow (`tensorflow.tsl.profiler.protobuf`); reading a trace is a host-side job.
"""

import argparse
import collections
import gzip
import re

KINDS = (  # first match wins
    ("attention (cuDNN fused)", re.compile(r"cudnn|fmha|flash", re.I)),
    ("matrix products", re.compile(r"gemm|cublas|nvjet|cutlass|xmma|dot|matmul|convolution",
                                   re.I)),
    ("copies / transposes", re.compile(r"copy|transpose|memcpy|memset", re.I)),
    ("collectives", re.compile(r"all-reduce|all-gather|reduce-scatter|collective|nccl", re.I)),
    ("reductions / elementwise fusions", re.compile(r"fusion|reduce|loop|input", re.I)),
)


def load_space(path: str):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        space = xplane_pb2.XSpace()
        space.ParseFromString(f.read())
    return space


def op_times(space) -> collections.Counter:
    """Picoseconds per op name over the device planes' XLA op lines."""
    totals: collections.Counter = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        lines = [line for line in plane.lines if line.name == "XLA Ops"] or list(plane.lines)
        for line in lines:
            for event in line.events:
                totals[plane.event_metadata[event.metadata_id].name] += event.duration_ps
    return totals


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    print(summary(op_times(load_space(args.trace)), args.top))


if __name__ == "__main__":
    main()
