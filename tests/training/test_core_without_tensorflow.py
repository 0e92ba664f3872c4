"""The core runs where JAX is the only framework (an accelerator image): with TensorFlow,
seqio, tensorflow_text and tensorflow_datasets refused by the import system, BERT, GPT and
ELMo each build, take one sharded train step and save and restore a checkpoint."""

import subprocess
import sys
import textwrap

from tests.process_env import process_env

SCRIPT = textwrap.dedent('''
    import sys

    # As if not installed: `import` raises ModuleNotFoundError and importlib.util.find_spec
    # answers None (how etils, orbax's path library, asks whether TensorFlow is there).
    REFUSED = ("tensorflow", "seqio", "tensorflow_text", "tensorflow_datasets")
    for name in REFUSED:
        sys.modules[name] = None

    import jax, numpy as np
    from bertjax.models.bert import bert_config
    from bertjax.models.elmo import elmo_config
    from bertjax.models.gpt import gpt_config
    from bertjax.objectives.bilm import elmo_pretraining
    from bertjax.objectives.lm import gpt_pretraining
    from bertjax.objectives.pretraining import bert_pretraining
    from bertjax.training.checkpoint import Checkpointer
    from bertjax.training.loop import build_trainer
    from bertjax.training.mesh import make_mesh
    from bertjax.training.optim import make_optimizer

    WORKDIR = sys.argv[1]
    objectives = {
        "bert": bert_pretraining(bert_config("tiny", vocab_size=512)),
        "gpt": gpt_pretraining(gpt_config("gpt2_tiny", vocab_size=512)),
        "elmo": elmo_pretraining(elmo_config("tiny", vocab_size=512)),
    }
    mesh = make_mesh(fsdp=2)
    for name, objective in objectives.items():
        tx = make_optimizer("adamw", learning_rate=1e-3, warmup_steps=1, total_steps=10)
        trainer = build_trainer(objective, tx, mesh, batch_size=4, seq_length=16)
        batch = objective.example_batch(4, 16)
        for key, value in batch.items():  # weight every prediction, so the loss is not 0
            if "weight" in key:
                batch[key] = np.ones_like(value)
        state = trainer.init()
        before = jax.device_get(state.params)
        for _ in range(2):  # the learning rate warms up from 0 at step 0
            state, metrics = trainer.step(state, trainer.device_batch(batch))
        assert np.isfinite(float(metrics["loss"])) and float(metrics["loss"]) > 0, name
        after = jax.device_get(state.params)
        assert any(not np.array_equal(a, b) for a, b in
                   zip(jax.tree.leaves(before), jax.tree.leaves(after))), name
        checkpointer = Checkpointer(f"{WORKDIR}/{name}")
        checkpointer.save(1, state, {"position": 1})
        checkpointer.wait()
        restored, data = checkpointer.restore(trainer.abstract_state)
        assert data == {"position": 1}, data
        for a, b in zip(jax.tree.leaves(jax.device_get(restored)),
                        jax.tree.leaves(jax.device_get(state)), strict=True):
            np.testing.assert_array_equal(a, b)
        checkpointer.close()
    loaded = sorted(m for m, module in sys.modules.items()
                    if m.split(".")[0] in REFUSED and module is not None)
    assert not loaded, loaded
    print("core ok:", ", ".join(objectives), "on", mesh.shape)
''')


def test_core_trains_and_checkpoints_without_tensorflow_or_seqio(tmp_path):
    env = process_env(devices=2)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the suite's cache: not part of this check
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tensorflow" not in done.stderr, done.stderr[-3000:]
    assert "core ok: bert, gpt, elmo" in done.stdout


TRAIN = textwrap.dedent('''
    import sys

    REFUSED = ("tensorflow", "seqio", "tensorflow_text", "tensorflow_datasets")
    for name in REFUSED:
        sys.modules[name] = None

    from bertjax.cli import train

    sys.argv = ["bertjax-train", *sys.argv[1:]]
    try:
        train.run()
    except SystemExit as done:
        if done.code:
            raise
    loaded = sorted(m for m, module in sys.modules.items()
                    if m.split(".")[0] in REFUSED and module is not None)
    assert not loaded, loaded
    print("trained without tensorflow")
''')


def test_bertjax_train_runs_without_tensorflow_from_a_store_and_from_text(bert_sample,
                                                                         tmp_path):
    """An accelerator image with JAX alone: bertjax-train trains BERT from a token store built
    where TensorFlow is, and GPT from text, its batches built in Python."""
    from bertjax.data.bert.source import BertPretrainingSource
    from bertjax.data.store import build

    vocab = tmp_path / "vocab"
    learned = BertPretrainingSource(corpus=str(bert_sample), vocab_size=600)
    learned.prepare(vocab)
    learned.save(vocab)
    build.build("bert", str(bert_sample), str(vocab), tmp_path / "store")
    env = process_env(devices=1)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    runs = {
        "bert": ("configs/experiments/bert_tiny_cpu.gin",
                 f"bert_pretraining_source.corpus='store:{tmp_path / 'store'}'"),
        "gpt": ("configs/experiments/gpt_tiny_cpu.gin",
                f"lm_pretraining_source.corpus='{bert_sample}'"),
    }
    for family, (gin_file, corpus) in runs.items():
        workdir = tmp_path / family
        done = subprocess.run(
            [sys.executable, "-c", TRAIN, f"--gin_file={gin_file}", f"--gin.{corpus}",
             "--gin.NUM_STEPS=3", "--gin.train.log_every=1", f"--workdir={workdir}",
             "--noprogress"], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "trained without tensorflow" in done.stdout, done.stdout[-3000:]
        logged = [line for line in (workdir / "metrics.jsonl").read_text().splitlines()
                  if '"loss"' in line]
        assert len(logged) == 3, logged
