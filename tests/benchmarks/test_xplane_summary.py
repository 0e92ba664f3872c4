"""benchmarks/xplane_summary.py sums a profile's device ops by kind (checked on an XSpace built
with the profiler's own protocol buffer) and by name stack (checked on a trace of BERT-tiny's
train step recorded on the CPU). The protocol buffer is TensorFlow's, a runtime dependency of
bertjax, so the test imports it outright: a module TensorFlow moved fails here, where an
import-or-skip would have skipped in every run and checked nothing."""

import gzip
import sys

import pytest
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


@pytest.mark.unit
def test_device_ops_are_summed_by_kind(tmp_path):
    path = tmp_path / "trace.xplane.pb.gz"
    with gzip.open(path, "wb") as f:
        f.write(make_space().SerializeToString())
    totals = xplane_summary.op_times(xplane_summary.load_space(str(path)))
    assert totals["nvjet_sm90_tst_128x160"] == 6e9 and sum(totals.values()) == 10e9
    text = xplane_summary.summary(totals, top=2)
    assert text.startswith("device time 10.00 ms over 4 distinct ops")
    assert "70.0%      7.000 ms  matrix products" in text
    assert "10.0%      1.000 ms  attention (fused kernel)" in text
    assert "20.0%      2.000 ms  reductions / elementwise fusions" in text
    assert text.endswith("20.0%      2.000 ms  loop_add_fusion_7")


def test_a_recorded_train_step_is_attributed_by_name_stack(tmp_path):
    """Two steps of BERT-tiny's train step under jax.profiler on the CPU: every op of the step
    is found in its HLO text, the step count is read from the trace, and the optimizer,
    dropout, LayerNorm, GELU, loss and matrix products each get their own row; the
    Transformer's LayerNorms run per layer, the optimizer once per step."""
    import flax.linen as nn
    import jax

    from bertjax.models.bert import bert_config
    from bertjax.objectives.pretraining import bert_pretraining
    from bertjax.training.loop import build_trainer
    from bertjax.training.mesh import make_mesh
    from bertjax.training.optim import make_optimizer
    from tests.training.test_step import random_batch

    task = bert_pretraining(bert_config("tiny", vocab_size=128, max_position_embeddings=64))
    trainer = build_trainer(task, make_optimizer(learning_rate=1e-3, warmup_steps=2,
                                                 total_steps=10),
                            make_mesh(devices=jax.devices()[:1]), 8, 32)
    batch = trainer.device_batch(random_batch(vocab_size=128))
    state = trainer.init()
    state, metrics = trainer.step(state, batch)  # compiled before the trace
    jax.block_until_ready(metrics)
    jax.profiler.start_trace(str(tmp_path))
    for _ in range(2):
        state, metrics = trainer.step(state, batch)
    jax.block_until_ready(metrics)
    jax.profiler.stop_trace()
    trace = next(tmp_path.rglob("*.trace.json.gz"))
    with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(trainer.rules):  # as it ran
        hlo = trainer.step.jitted.lower(state, batch).compile().as_text()

    events = xplane_summary.load_events(str(trace))
    step_events = [e for e in events if e.module.startswith("jit_train_step")]
    assert step_events and xplane_summary.count_steps(step_events) == 2
    regions, unmatched = xplane_summary.attribute(step_events, hlo)
    assert unmatched == 0
    busy = {h for h, r in regions.items() if r.ps}
    assert {"optimizer update", "dropout and its random bits", "LayerNorm", "GELU",
            "loss and softmax", "matrix products"} <= busy, busy
    # counted in ops, not time: one slow embedding LayerNorm on a busy CPU outweighed the
    # four of the layers in a 2-step trace
    assert regions["LayerNorm"].per_layer_events > 0.5 * regions["LayerNorm"].events
    assert regions["optimizer update"].per_layer_ps == 0
    table = xplane_summary.region_table(regions, 2, unmatched)
    assert "| optimizer update |" in table and "(+" not in table
    assert sum(r.events for r in regions.values()) == len(step_events)


@pytest.mark.unit
def test_flax_dropout_modules_count_as_dropout_wherever_they_sit():
    """Attention's probability dropout is flax's `Dropout_0` module under the attention scope:
    its random bits and mask are dropout's time, not attention's (the name stack's case is
    flax's, so the heading's test ignores case)."""
    stack = ("jit(train_step)/jvp(BertHead)/bert/encoder/layer_3/attention/attention._xla/"
             "Dropout_0/stack")
    assert xplane_summary.region_of(stack, "reductions / elementwise fusions") == \
        "dropout and its random bits"
    softmax = "jit(train_step)/jvp(BertHead)/bert/encoder/layer_3/attention/attention._xla/exp"
    assert xplane_summary.region_of(softmax, "reductions / elementwise fusions") == \
        "attention: softmax, masks, reshapes"


@pytest.mark.unit
def test_gpu_kernels_are_matched_to_their_instructions_by_kernel_name():
    """XLA:GPU names a fusion's kernel with '_' for the instruction's '.': an event whose
    `hlo_op` is not an instruction of the HLO text is attributed by its kernel's name, and
    one that matches neither way is counted apart."""
    hlo = "\n".join([
        "fused_ln {",
        '  %x.1 = f32[8]{0} rsqrt(f32[8]{0} %p), metadata={op_name="jit(train_step)/'
        'bert/encoder/layer_0/attention_layer_norm/rsqrt"}',
        "}",
        "ENTRY %main {",
        "  %loop_rsqrt_fusion.23 = f32[8]{0} fusion(f32[8]{0} %a), kind=kLoop, "
        "calls=fused_ln",
        "}"])
    events = [xplane_summary.OpEvent("jit_train_step/loop_rsqrt_fusion.23",
                                     "loop_rsqrt_fusion_23", 3_000),
              xplane_summary.OpEvent("", "loop_rsqrt_fusion_23", 2_000),
              xplane_summary.OpEvent("fusion.999", "loop_add_fusion_999", 1_000)]
    regions, unmatched = xplane_summary.attribute(events, hlo)
    assert regions["LayerNorm"].ps == 5_000 and regions["LayerNorm"].per_layer_ps == 5_000
    assert unmatched == 1_000
