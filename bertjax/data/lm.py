"""Causal-LM data: documents joined by <|endoftext|>, packed into fixed-length sequences.

    documents --(byte-level BPE)--> ids + [EOS] + ids + [EOS] ...   one token stream
    example i of an epoch: stream[c*L : c*L + L] -> input_ids, stream[c*L+1 : c*L+L+1] -> targets

where chunk c is the i-th of a seeded permutation of the epoch's (len - 1) // L chunks. No
padding, so every loss weight is 1; the weights are there for batches that do pad (eval,
fine-tuning). Global example g belongs to epoch g // N; host p of P takes the g with
g % P == p, and the split "train[g:]" starts at example g, so a resume skips nothing twice.

`LmPretrainingSource` is what the training loop consumes (gin: lm_pretraining_source).
Corpora: "stdlib" (offline), text files (comma-separated paths, globs or directories), or
"tfds:NAME[:SPLIT]" such as "tfds:openwebtext" or "tfds:c4/en:train" for cloud runs (each
host reads its share). Vocabulary: "learn" (byte-level BPE learned from the corpus, kept in
the workdir), a directory holding vocab.json + merges.txt, or "VOCAB_JSON,MERGES_TXT".
"""

import logging
import pathlib
import re
from collections.abc import Iterator, Sequence

import jax
import numpy as np
import seqio
import tensorflow as tf

from bertjax.data import corpora
from bertjax.data.bpe import ByteLevelBPE, learn_bpe
from bertjax.data.bpe_vocab import ByteLevelBPEVocabulary
from bertjax.data.tasks import parse_split
from bertjax.models.gpt import FAMILY, GptConfig
from bertjax.models.record import write_record

LEARN_CHARS = 200_000_000  # vocabulary learning reads at most this much text


class LmDataError(ValueError):
    """A corpus or vocabulary setting the LM pipeline cannot use."""


# ---------------------------------------------------------------- packing


def pack_documents(documents_ids: Sequence[Sequence[int]], eos_id: int) -> np.ndarray:
    """One int32 token stream: each document's ids followed by EOS."""
    pieces = [np.append(np.asarray(ids, np.int32), np.int32(eos_id)) for ids in documents_ids]
    return np.concatenate(pieces) if pieces else np.zeros((0,), np.int32)


def num_chunks(stream_length: int, seq_length: int) -> int:
    """Examples per epoch: chunks of `seq_length` inputs, each with its next-token target."""
    return max(stream_length - 1, 0) // seq_length


def iterate_lm_examples(stream: np.ndarray, seq_length: int, seed: int = 0, shuffle: bool = True,
                        start_index: int = 0, process_index: int = 0, process_count: int = 1,
                        num_examples: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Examples g >= start_index with g % process_count == process_index, endlessly."""
    chunks = num_chunks(len(stream), seq_length)
    if chunks == 0:
        raise LmDataError(
            f"the corpus has {len(stream)} tokens, fewer than seq_length + 1 = {seq_length + 1}: "
            "use a bigger corpus or a shorter train.seq_phases length"
        )
    g = start_index + (process_index - start_index) % process_count
    weights = np.ones((seq_length,), np.float32)
    epoch, order, produced = -1, None, 0
    while num_examples is None or produced < num_examples:
        if g // chunks != epoch:
            epoch = g // chunks
            order = np.random.default_rng([seed, epoch]).permutation(chunks) if shuffle else None
        j = g % chunks
        start = int(order[j] if shuffle else j) * seq_length
        yield {
            "input_ids": stream[start:start + seq_length],
            "target_ids": stream[start + 1:start + seq_length + 1],
            "loss_weights": weights,
        }
        g += process_count
        produced += 1


# ---------------------------------------------------------------- seqio


class PackedLmSource(seqio.DataSource):
    """Endless, deterministic stream of packed LM examples over an in-memory token stream."""

    def __init__(self, stream: np.ndarray, seq_length: int, shuffle: bool = True):
        super().__init__(splits=["train"], caching_permitted=False)
        self.stream, self.seq_length, self.shuffle = stream, seq_length, shuffle

    @property
    def supports_arbitrary_sharding(self) -> bool:
        return True

    def list_shards(self, split: str) -> list[str]:
        return [split]

    def get_dataset(self, split: str = "train", shuffle: bool = True, seed: int | None = None,
                    shard_info: seqio.ShardInfo | None = None, *, sequence_length: object = None,
                    use_cached: bool = False, num_epochs: int | None = 1) -> tf.data.Dataset:
        del shuffle, sequence_length, use_cached, num_epochs  # order is seeded inside
        start = parse_split(split)
        index, count = (shard_info.index, shard_info.num_shards) if shard_info else (0, 1)

        def generate() -> Iterator[dict[str, np.ndarray]]:
            return iterate_lm_examples(self.stream, self.seq_length, seed or 0, self.shuffle,
                                       start, index, count)

        L = self.seq_length
        signature = {
            "input_ids": tf.TensorSpec((L,), tf.int32),
            "target_ids": tf.TensorSpec((L,), tf.int32),
            "loss_weights": tf.TensorSpec((L,), tf.float32),
        }
        return tf.data.Dataset.from_generator(generate, output_signature=signature)


def register_lm_task(name: str, stream: np.ndarray, vocab: ByteLevelBPEVocabulary,
                     seq_length: int, shuffle: bool = True) -> seqio.Task:
    """Register (or replace) the seqio Task `name` producing packed LM examples."""
    ids = seqio.Feature(vocab, add_eos=False)
    features = {
        "input_ids": ids,
        "target_ids": seqio.Feature(vocab, add_eos=False),
        "loss_weights": seqio.Feature(seqio.PassThroughVocabulary(1), add_eos=False,
                                      dtype=tf.float32),
    }
    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    source = PackedLmSource(stream, seq_length, shuffle)
    return seqio.TaskRegistry.add(name, source=source, output_features=features)


# ---------------------------------------------------------------- corpora


def tfds_texts(name: str, split: str, text_key: str = "text",
               data_dir: str | None = None) -> Iterator[str]:
    """Raw texts of a TFDS dataset (newlines kept), e.g. openwebtext or c4/en."""
    import tensorflow_datasets as tfds  # heavy: imported only when a TFDS corpus is used

    try:
        dataset = tfds.load(name, split=split, data_dir=data_dir, download=False,
                            shuffle_files=False)
    except (ValueError, AssertionError, OSError) as e:
        reason = " ".join(str(e).split())[:300]
        raise LmDataError(f"TFDS corpus {name!r} split {split!r}: {reason}; fix "
                          "lm_pretraining_source.corpus or prepare it with `tfds build`") from e
    if text_key not in dataset.element_spec:
        raise LmDataError(f"TFDS corpus {name!r} has no feature {text_key!r} (has "
                          f"{sorted(dataset.element_spec)}): set lm_pretraining_source.text_key")
    for example in tfds.as_numpy(dataset):
        yield example[text_key].decode("utf-8", errors="replace")


def load_texts(corpus: str, corpus_format: str = "bert", text_key: str = "text") -> list[str]:
    """Documents as texts: 'stdlib', file paths (comma-separated) or 'tfds:NAME[:SPLIT]'."""
    if corpus.startswith("tfds:"):
        name, _, split = corpus[len("tfds:"):].partition(":")
        split = split or "train"
        if jax.process_count() > 1:
            split = f"{split}[{jax.process_index()}shard]"  # each host reads its own documents
        return list(tfds_texts(name, split, text_key))
    if corpus == "stdlib":
        return [" ".join(doc) for doc in corpora.stdlib_documents()]
    try:
        documents = corpora.read_documents([p for p in corpus.split(",") if p], corpus_format)
    except corpora.CorpusError as e:
        raise LmDataError(f"{e} (lm_pretraining_source.corpus)") from None
    separator = "\n" if corpus_format == "bert" else " "  # bert format: one sentence a line
    return [separator.join(doc) for doc in documents]


# ---------------------------------------------------------------- the training loop's source


class LmPretrainingSource:
    """Packed next-token batches over one corpus; see the module docstring."""

    def __init__(self, corpus: str = "stdlib", corpus_format: str = "bert", vocab: str = "learn",
                 vocab_size: int = 50257, shuffle: bool = True, seed: int = 0,
                 text_key: str = "text", model: GptConfig | None = None):
        self.corpus_name, self.corpus_format, self.text_key = corpus, corpus_format, text_key
        self.vocab_spec, self.requested_vocab_size = vocab, vocab_size
        self.shuffle, self.seed, self.model = shuffle, seed, model
        self.vocab: ByteLevelBPEVocabulary | None = None
        self.stream: np.ndarray | None = None
        self._unsaved: ByteLevelBPE | None = None  # tokenizer files save() writes

    @property
    def vocab_size(self) -> int:
        return self._vocab().vocab_size

    def prepare(self, workdir: str | pathlib.Path) -> None:
        """Read the corpus, learn or load the BPE, tokenize and pack; nothing is written."""
        workdir = pathlib.Path(workdir)
        texts = load_texts(self.corpus_name, self.corpus_format, self.text_key)
        if not texts:
            raise LmDataError(f"corpus {self.corpus_name!r} has no documents: point "
                              "lm_pretraining_source.corpus at some text")
        bpe = self._load_or_learn(workdir, texts)
        self.vocab = ByteLevelBPEVocabulary(bpe)
        if self.model is not None and bpe.vocab_size > self.model.vocab_size:
            raise LmDataError(
                f"the BPE vocabulary has {bpe.vocab_size} tokens but the model's vocab_size is "
                f"{self.model.vocab_size}: set gpt_config.vocab_size >= {bpe.vocab_size}"
            )
        self.stream = pack_documents([bpe.encode(t) for t in texts], bpe.eos_id)
        logging.info("corpus %s: %d documents, %d tokens, vocabulary of %d", self.corpus_name,
                     len(texts), len(self.stream), bpe.vocab_size)

    def save(self, workdir: str | pathlib.Path) -> None:
        """Keep the BPE files and the model record in the workdir (once the run starts)."""
        workdir = pathlib.Path(workdir)
        if jax.process_index() != 0:
            return
        workdir.mkdir(parents=True, exist_ok=True)
        if self._unsaved is not None:
            self._unsaved.save(workdir)
            self._unsaved = None
        if self.model is not None:
            write_record(workdir, FAMILY, self.model, tokenizer={
                "vocab": "vocab.json", "merges": "merges.txt", "vocab_size": self.vocab_size})

    def _load_or_learn(self, workdir: pathlib.Path, texts: list[str]) -> ByteLevelBPE:
        kept = workdir / "vocab.json", workdir / "merges.txt"
        if self.vocab_spec == "learn":
            if all(p.is_file() for p in kept):  # a resumed run keeps its vocabulary
                return ByteLevelBPE.from_files(*kept)
            if jax.process_count() > 1:  # each host would learn from its own documents
                raise LmDataError(
                    "a multi-host run cannot learn its vocabulary: learn it once on one host and "
                    "set lm_pretraining_source.vocab to the VOCAB_JSON,MERGES_TXT it wrote"
                )
            self._unsaved = learn_bpe(_prefix(texts, LEARN_CHARS), self.requested_vocab_size)
            return self._unsaved
        files = self._vocab_files()
        bpe = ByteLevelBPE.from_files(*files)
        if all(p.is_file() for p in kept):
            if ByteLevelBPE.from_files(*kept).vocab != bpe.vocab:
                raise LmDataError(
                    f"{workdir} was trained with another vocabulary than {files[0]}: use a new "
                    "--workdir or the run's own lm_pretraining_source.vocab"
                )
        else:
            self._unsaved = bpe  # a copy goes into the workdir: it is self-contained
        return bpe

    def _vocab_files(self) -> tuple[pathlib.Path, pathlib.Path]:
        spec = self.vocab_spec
        if "," in spec:
            vocab_json, merges_txt = (pathlib.Path(p.strip()) for p in spec.split(",", 1))
        else:
            vocab_json, merges_txt = pathlib.Path(spec) / "vocab.json", pathlib.Path(spec) / (
                "merges.txt")
        return vocab_json, merges_txt

    def _vocab(self) -> ByteLevelBPEVocabulary:
        if self.vocab is None:
            raise RuntimeError("call prepare(workdir) before reading batches")
        return self.vocab

    def task(self, seq_length: int) -> seqio.Task:
        """The registered seqio Task for this corpus at `seq_length`."""
        slug = re.sub(r"[^a-z0-9]+", "_", self.corpus_name.lower()).strip("_")[-40:]
        return register_lm_task(f"bertjax_lm_{slug}_{seq_length}", self.stream, self._vocab(),
                                seq_length, self.shuffle)

    def batches(self, start_index: int, seq_length: int, batch_size: int
                ) -> Iterator[dict[str, np.ndarray]]:
        """This host's share of global batches from global example `start_index` on."""
        shard = seqio.ShardInfo(jax.process_index(), jax.process_count())
        if self.corpus_name.startswith("tfds:"):  # documents are already split per host
            shard, start_index = None, start_index // jax.process_count()
        dataset = self.task(seq_length).get_dataset(
            split=f"train[{start_index}:]", shuffle=False, seed=self.seed, shard_info=shard,
            num_epochs=1, trim_output_features=False, try_in_mem_cache=False,
        )
        return dataset.batch(batch_size, drop_remainder=True).prefetch(2).as_numpy_iterator()


def _prefix(texts: list[str], max_chars: int) -> Iterator[str]:
    """Texts until `max_chars` characters have been given."""
    total = 0
    for text in texts:
        if total >= max_chars:
            return
        total += len(text)
        yield text
