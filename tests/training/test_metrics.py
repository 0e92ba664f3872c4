"""The metric sinks, read back by TensorBoard's own event reader."""

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bertjax.training.metrics import MetricWriter

pytestmark = pytest.mark.unit  # the unit tier: make test-unit


def log_steps(workdir, steps, resumed_at=0, offset=0.0):
    writer = MetricWriter(workdir)
    if resumed_at:
        writer.resume_from(resumed_at)
    for step in steps:
        writer.write(step, {"loss": step + offset, "mlm_accuracy": step / 100})
    writer.close()


def tensorboard_scalars(workdir, tag):
    accumulator = EventAccumulator(str(workdir / "tensorboard"))
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def test_tensorboard_reads_every_scalar_written(tmp_path):
    log_steps(tmp_path, [5, 10, 15])
    assert tensorboard_scalars(tmp_path, "loss") == [(5, 5.0), (10, 10.0), (15, 15.0)]
    assert [step for step, _ in tensorboard_scalars(tmp_path, "mlm_accuracy")] == [5, 10, 15]
    assert tensorboard_scalars(tmp_path, "mlm_accuracy")[1][1] == pytest.approx(0.1)


def test_a_resumed_run_replaces_what_was_logged_after_its_checkpoint(tmp_path):
    log_steps(tmp_path, [5, 10, 15, 20])  # interrupted after step 20; last checkpoint at 10
    log_steps(tmp_path, [15, 20, 25], resumed_at=10, offset=0.5)
    expected = [(5, 5.0), (10, 10.0), (15, 15.5), (20, 20.5), (25, 25.5)]
    assert tensorboard_scalars(tmp_path, "loss") == expected
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [(row["step"], row["loss"]) for row in map(json.loads, lines)] == expected


def test_nothing_is_written_before_the_first_logged_step(tmp_path):
    MetricWriter(tmp_path).close()
    assert list(tmp_path.iterdir()) == []


def test_event_records_match_tensorflows_own_encoding(tmp_path):
    """Bytes equal to TensorFlow's TFRecordWriter around TensorBoard's Event proto."""
    tf = pytest.importorskip("tensorflow")
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.compat.proto.summary_pb2 import Summary

    from bertjax.training.event_file import encode_event, tfrecord

    ours = encode_event(1234.5, step=7, scalars={"loss": 2.25, "grad_norm": -0.5})
    theirs = Event(wall_time=1234.5, step=7, summary=Summary(value=[
        Summary.Value(tag="loss", simple_value=2.25),
        Summary.Value(tag="grad_norm", simple_value=-0.5)]))
    assert Event.FromString(ours) == theirs
    start = encode_event(1.0, step=2**40, session_start=True)
    assert Event.FromString(start) == Event(
        wall_time=1.0, step=2**40, session_log=SessionLog(status=SessionLog.START))
    path = str(tmp_path / "record")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(ours)
    assert (tmp_path / "record").read_bytes() == tfrecord(ours)
