"""benchmarks/xplane_summary.py sums a profile's device ops by kind: checked on an XSpace built
with the profiler's own protocol buffer. The protocol buffer is TensorFlow's, a runtime
dependency of bertjax, so the test imports it outright: a module TensorFlow moved fails here,
where an import-or-skip would have skipped in every run and checked nothing."""

import gzip
import sys

from tensorflow.tsl.profiler.protobuf import xplane_pb2

from tests.benchmarks.test_quick import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import xplane_summary  # noqa: E402 - benchmarks/ is a directory of scripts, not a package


def make_space():
    space = xplane_pb2.XSpace()
    host = space.planes.add(name="/host:CPU")
    host.event_metadata[1].name = "python"
    host.lines.add(name="python").events.add(metadata_id=1, duration_ps=10**12)
    gpu = space.planes.add(name="/device:GPU:0")
    names = {1: "nvjet_sm90_tst_128x160", 2: "cudnn_generated_fort_native_sdpa_fprop",
             3: "loop_add_fusion_7", 4: "gemm_fusion_dot_3"}
    for key, name in names.items():
        gpu.event_metadata[key].name = name
    ops = gpu.lines.add(name="XLA Ops")
    for key, ps in ((1, 4e9), (1, 2e9), (2, 1e9), (3, 2e9), (4, 1e9)):
        ops.events.add(metadata_id=key, duration_ps=int(ps))
    gpu.lines.add(name="XLA Modules").events.add(metadata_id=3, duration_ps=10**13)
    return space


def test_device_ops_are_summed_by_kind(tmp_path):
    path = tmp_path / "trace.xplane.pb.gz"
    with gzip.open(path, "wb") as f:
        f.write(make_space().SerializeToString())
    totals = xplane_summary.op_times(xplane_summary.load_space(str(path)))
    assert totals["nvjet_sm90_tst_128x160"] == 6e9 and sum(totals.values()) == 10e9
    text = xplane_summary.summary(totals, top=2)
    assert text.startswith("device time 10.00 ms over 4 distinct ops")
    assert "70.0%      7.000 ms  matrix products" in text
    assert "10.0%      1.000 ms  attention (cuDNN fused)" in text
    assert "20.0%      2.000 ms  reductions / elementwise fusions" in text
    assert text.endswith("20.0%      2.000 ms  loop_add_fusion_7")
