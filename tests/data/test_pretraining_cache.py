"""Static examples cached by seqio's Beam pipeline (DirectRunner), read back by training."""

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from bertjax.data.bert import cache as pretraining_cache
from bertjax.data.bert.cache import Settings, parse_settings, task_name
from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.source import DataError

LENGTH, BATCH = 64, 32
STATIC = dict(corpus="stdlib", masking="static", dupe_factor=1, static_groups=2, seed=0)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """A vocabulary learned from the stdlib corpus once: the path of its vocab.txt."""
    directory = tmp_path_factory.mktemp("vocab")
    source = BertPretrainingSource(corpus="stdlib", vocab_size=8000)
    source.prepare(directory)
    source.save(directory)
    return str(directory / "vocab.txt")


def take(iterator, n):
    return list(itertools.islice(iterator, n))


def test_settings_errors_are_one_line(tmp_path, vocab):
    for text, match in (("{}", "no 'vocab'"), ('{"vocab": "v", "lenght": 3}', "unknown keys"),
                        (str(tmp_path / "absent.json"), "not found: fix --bertjax_cache")):
        with pytest.raises(DataError, match=match) as err:
            parse_settings(text)
        assert "\n" not in str(err.value)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps([{"vocab": vocab}, {"vocab": vocab, "seq_length": 512}]))
    assert [s.seq_length for s in parse_settings(str(path))] == [128, 512]


def test_task_names_change_with_what_changes_the_examples(tmp_path, vocab):
    base = Settings(vocab=vocab, seq_length=LENGTH)
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text(open(vocab).read() + "extra\n")
    names = {task_name(base)}
    for change in ({"seed": 1}, {"dupe_factor": 2}, {"static_groups": 3}, {"nsp": False},
                   {"seq_length": 128}, {"vocab": str(other_vocab)}, {"corpus": "x.txt"}):
        names.add(task_name(Settings(**{**vars(base), **change})))
    assert len(names) == 8
    same = [Settings(**{**vars(base), "tfds_data_dir": "gs://elsewhere"}),
            Settings(**{**vars(base), "max_predictions_per_seq": 12})]  # 12 is the default here
    assert {task_name(s) for s in same} == {task_name(base)}
    assert task_name(base).startswith(f"bertjax_static_stdlib_{LENGTH}_")


def test_training_without_the_cache_says_how_to_build_it(tmp_path, vocab):
    source = BertPretrainingSource(vocab=vocab, cache_dir=str(tmp_path / "cache"), **STATIC)
    source.prepare(tmp_path / "work")  # needs no corpus
    assert source.corpus is None
    with pytest.raises(DataError, match="has no cache bertjax_static_stdlib_64_.*cache_tasks_main"
                       ) as err:
        source.batches(0, LENGTH, BATCH)
    assert "\n" not in str(err.value)


def build_cache(settings: dict, cache_dir) -> str:
    """Run seqio's cache_tasks_main with the DirectRunner; returns the task name."""
    path = cache_dir / "settings.json"
    path.write_text(json.dumps(settings))
    name = task_name(Settings(**settings))
    command = [sys.executable, "-m", "seqio.scripts.cache_tasks_main",
               f"--module_import={pretraining_cache.__name__}", f"--tasks={name}",
               f"--output_cache_dir={cache_dir}", "--min_shards=1",
               f"--pipeline_options=--runner=DirectRunner,--bertjax_cache_settings={path}"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return name


@pytest.mark.e2e  # the fast tier builds the same cache of the held-out part (below)
@pytest.mark.slow
def test_a_direct_runner_cache_reads_back_the_on_the_fly_static_examples(tmp_path, vocab):
    epoch = check_cache_reads_back("stdlib", vocab, tmp_path)
    assert 3000 < epoch < 6000  # a few thousand examples


def test_a_direct_runner_cache_of_a_small_corpus_reads_back_the_on_the_fly_examples(
        tmp_path, vocab):
    """The Beam pipeline and the reads of the test above, on the stdlib corpus's held-out
    part (a 25th of it): the same checks in 20 s instead of 33 s."""
    epoch = check_cache_reads_back("stdlib:held_out", vocab, tmp_path)
    assert 100 < epoch < 300  # a couple of hundred examples


def check_cache_reads_back(corpus: str, vocab: str, tmp_path) -> int:
    """Build `corpus`'s static-masking cache with the DirectRunner (2 groups), then check that
    training reads back the on-the-fly examples, in order, past the epoch's end, from any
    position and host: returns the epoch's example count."""
    pytest.importorskip("apache_beam", reason="apache_beam is absent: pip install -e '.[beam]'")
    static = {**STATIC, "corpus": corpus}
    settings = dict(corpus=corpus, vocab=vocab, seq_length=LENGTH, dupe_factor=1,
                    static_groups=2, seed=0)
    name = build_cache(settings, tmp_path)
    assert (tmp_path / name / "COMPLETED").is_file()
    fly = BertPretrainingSource(vocab=vocab, **static)
    fly.prepare(tmp_path / "fly")
    cached = BertPretrainingSource(vocab=vocab, cache_dir=str(tmp_path), **static)
    cached.prepare(tmp_path / "cached")
    epoch = sum(cached.cache_task(LENGTH).get_cached_stats(f"group{g:05d}")["examples"]
                for g in range(2))
    batches = epoch // BATCH + 8  # past the end of the first epoch
    expected = take(fly.batches(0, LENGTH, BATCH), batches)
    got = take(cached.batches(0, LENGTH, BATCH), batches)
    for a, b in zip(expected, got, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    flat = {key: np.concatenate([b[key] for b in expected]) for key in expected[0]}
    start = epoch - 40  # resume mid-batch, across the epoch's end
    resumed = take(cached.example_blocks(LENGTH, BATCH, start, 0, 1), 1)[0]
    for key, value in resumed.items():
        np.testing.assert_array_equal(value[:200], flat[key][start:start + 200], err_msg=key)
    shards = [take(cached.example_blocks(LENGTH, 16, 0, p, 2), 2) for p in range(2)]
    for p in range(2):  # host p holds blocks p, p + 2, ... of 16 of the single-host stream
        owned = np.concatenate([np.arange(b * 16, b * 16 + 16) for b in range(p, 256, 2)])
        rows = np.concatenate([blk["input_ids"] for blk in shards[p]])
        owned = owned[:len(rows)]
        owned = owned[owned < len(flat["input_ids"])]  # as far as `expected` reaches
        assert len(owned) >= 100
        np.testing.assert_array_equal(rows[:len(owned)], flat["input_ids"][owned])
    return epoch
