"""The ELMo data source the training loop consumes (gin: `elmo_source`).

`prepare(workdir)` reads the corpus ("stdlib", comma-separated files, or "tfds:lm1b" and the
like, as for BERT), tokenizes it, learns the word vocabulary by frequency or loads a given one
(a learned one is kept as WORKDIR/elmo_vocab.txt so a resumed run uses the same ids), and
records the run in WORKDIR/model.json: the model family ("elmo"), the model config, the
vocabulary and the tokenizer, which is what `bertjax-embed` needs to use the checkpoints.
`batches(start, seq_length, batch_size)` yields this host's numpy batches from the seqio Task
for that length and mode (see `bertjax.data.elmo_tasks`), from a global example index.
"""

from __future__ import annotations

import logging
import pathlib
import re
import shutil
import tempfile
from collections.abc import Iterator

import jax
import numpy as np
import seqio

from bertjax.data import corpora
from bertjax.data.elmo_tasks import (
    MODES,
    ElmoDataSource,
    EncodedCorpus,
    encode_corpus,
    register_elmo_task,
)
from bertjax.data.elmo_vocab import (
    TOKENIZERS,
    ElmoVocabulary,
    learn_vocabulary,
    tokenize,
    write_vocab,
)
from bertjax.data.pipeline import load_corpus
from bertjax.models.elmo import FAMILY, ElmoConfig
from bertjax.models.record import RECORD, read_record, write_record

LEARNED_VOCAB = "elmo_vocab.txt"


class ElmoSource:
    """biLM batches over one corpus; see the module docstring.

    `model` is the ELMo config the task trains (its vocab_size caps the learned vocabulary and
    its token encoder and max_chars decide the character ids); `mode` must be the task's.
    """

    def __init__(self, model: ElmoConfig, corpus: str = "stdlib", corpus_format: str = "bert",
                 mode: str = "sentence", vocab: str = "learn", min_count: int = 1,
                 tokenizer: str = "simple", seed: int = 0):
        if mode not in MODES:
            raise ValueError(f"unknown ELMo data mode {mode!r}: set elmo_source.mode to "
                             "sentence or stream")
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer {tokenizer!r}: set elmo_source.tokenizer to "
                             f"{' or '.join(TOKENIZERS)}")
        self.model, self.corpus_name, self.corpus_format = model, corpus, corpus_format
        self.mode, self.vocab_spec, self.min_count = mode, vocab, min_count
        self.tokenizer, self.seed = tokenizer, seed
        self.vocab: ElmoVocabulary | None = None
        self.corpus: EncodedCorpus | None = None
        self._unsaved: pathlib.Path | None = None  # a learned vocabulary save() keeps

    @property
    def chars(self) -> bool:
        return self.model.token_encoder == "char_cnn"

    @property
    def vocab_size(self) -> int:
        return self._vocab().vocab_size

    def prepare(self, workdir: str | pathlib.Path) -> None:
        """Read and tokenize the corpus, load or learn the vocabulary; nothing is written."""
        workdir = pathlib.Path(workdir)
        _check_family(workdir)
        documents = load_corpus(self.corpus_name, self.corpus_format)
        token_lists = [tokenize(s, self.tokenizer) for doc in documents for s in doc]
        token_lists = [t for t in token_lists if t]
        if not token_lists:
            raise corpora.CorpusError(f"corpus {self.corpus_name!r} has no sentences: point "
                                      "elmo_source.corpus at text")
        self.vocab = self._load_or_learn_vocab(workdir, token_lists)
        if self.vocab_size > self.model.vocab_size:
            raise ValueError(f"the vocabulary has {self.vocab_size} words but the model's "
                             f"vocab_size is {self.model.vocab_size}: set elmo_config.vocab_size "
                             f">= {self.vocab_size}")
        self.corpus = encode_corpus(token_lists, self.vocab, self.model.max_chars)
        logging.info("corpus %s: %d sentences, %d tokens, vocabulary of %d", self.corpus_name,
                     len(self.corpus.sentences), self.corpus.num_tokens, self.vocab_size)

    def _load_or_learn_vocab(self, workdir: pathlib.Path, token_lists: list[list[str]]
                             ) -> ElmoVocabulary:
        if self.vocab_spec != "learn":
            return ElmoVocabulary(self.vocab_spec)
        path = workdir / LEARNED_VOCAB
        if not path.exists():  # learned into a staging directory; save() keeps it
            path = pathlib.Path(tempfile.mkdtemp(prefix="bertjax-vocab-")) / LEARNED_VOCAB
            write_vocab(learn_vocabulary(token_lists, self.model.vocab_size, self.min_count), path)
            self._unsaved = path
        return ElmoVocabulary(path)

    def save(self, workdir: str | pathlib.Path) -> None:
        """Keep a learned vocabulary and the model record in the workdir (once the run starts)."""
        workdir = pathlib.Path(workdir)
        if jax.process_index() != 0:
            return
        workdir.mkdir(parents=True, exist_ok=True)
        vocab = pathlib.Path(self._vocab().path).absolute()
        if self._unsaved is not None:
            shutil.copyfile(self._unsaved, workdir / LEARNED_VOCAB)
            self._unsaved = None
        if vocab.parent != workdir.absolute() and self.vocab_spec == "learn":
            vocab = workdir.absolute() / LEARNED_VOCAB
        write_record(workdir, FAMILY, self.model, tokenizer=self.tokenizer, mode=self.mode,
                     vocab=str(vocab))

    def _vocab(self) -> ElmoVocabulary:
        if self.vocab is None:
            raise RuntimeError("call prepare(workdir) before reading batches")
        return self.vocab

    def task(self, seq_length: int, global_batch: int = 1) -> seqio.Task:
        """The registered seqio Task for this corpus, mode, length (and stream batch)."""
        if self.corpus is None:
            raise RuntimeError("call prepare(workdir) before reading batches")
        slug = re.sub(r"[^a-z0-9]+", "_", self.corpus_name.lower()).strip("_")[-40:]
        name = f"bertjax_elmo_{self.mode}_{slug}_{seq_length}_{global_batch}"
        source = ElmoDataSource(self.corpus, self.mode, seq_length, self.model.max_chars,
                                self.chars, global_batch)
        return register_elmo_task(name, source, self._vocab())

    def batches(self, start_index: int, seq_length: int, batch_size: int
                ) -> Iterator[dict[str, np.ndarray]]:
        """This host's share of global batches from global example `start_index` on."""
        count = jax.process_count()
        shard = seqio.ShardInfo(jax.process_index(), count)
        global_batch = batch_size * count
        if self.corpus_name.startswith("tfds:"):  # each host already reads its own documents
            shard, start_index, global_batch = None, start_index // count, batch_size
        task = self.task(seq_length, global_batch if self.mode == "stream" else 1)
        dataset = task.get_dataset(
            split=f"train[{start_index}:]", shuffle=False, seed=self.seed, shard_info=shard,
            num_epochs=1, trim_output_features=False, try_in_mem_cache=False,
        )
        return dataset.batch(batch_size, drop_remainder=True).prefetch(2).as_numpy_iterator()


def _check_family(workdir: pathlib.Path) -> None:
    """Refuse a workdir that holds another family's run (its checkpoints would not fit)."""
    if (workdir / RECORD).is_file() or (workdir / "config.gin").is_file():
        family = read_record(workdir)["family"]
        if family != FAMILY:
            raise ValueError(f"{workdir} holds a {family.upper()} run: use a new --workdir for "
                             "ELMo")
