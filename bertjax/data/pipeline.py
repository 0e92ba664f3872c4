"""The BERT pretraining data source the training loop consumes.

`bert_pretraining_source` (gin) names a corpus and a vocabulary; `prepare(workdir)` reads the
corpus and learns or loads the WordPiece vocabulary, writing nothing; `save(workdir)` keeps a
learned one in the workdir once the run starts (so a resumed run uses the same ids);
`batches(start, seq_length, batch_size)` yields this host's numpy batches from the seqio Task
for that sequence length, starting at a global example index.

Corpora: "stdlib" (offline: the Python standard library's documentation), file or directory
paths (comma-separated; google-research/bert's format or plain text), or "tfds:NAME[:SPLIT]"
(e.g. "tfds:wikipedia/20230601.en") for cloud runs, where each host reads its own share of the
documents.
"""

import logging
import math
import pathlib
import re
import shutil
import tempfile
from collections.abc import Iterator

import jax
import numpy as np
import seqio

from bertjax.data import corpora
from bertjax.data.nsp import check_corpus
from bertjax.data.pretraining import PretrainingConfig
from bertjax.data.tasks import register_pretraining_task, tokenize_documents
from bertjax.data.wordpiece import WordPieceVocabulary, learn_vocabulary, write_vocab

LEARNED_VOCAB = "vocab.txt"


def default_max_predictions(seq_length: int, masked_lm_prob: float) -> int:
    """The paper's caps: 20 predictions at length 128, 80 at 512 (rounded up to a multiple of 4)."""
    return 4 * math.ceil(seq_length * masked_lm_prob / 4)


def load_corpus(corpus: str, corpus_format: str = "bert") -> list[list[str]]:
    """Documents (lists of sentences) of a named corpus; see the module docstring."""
    if corpus == "stdlib":
        return corpora.stdlib_documents()
    if corpus.startswith("tfds:"):
        name, _, split = corpus[len("tfds:") :].partition(":")
        split = split or "train"
        if jax.process_count() > 1:
            split = f"{split}[{jax.process_index()}shard]"  # each host reads its own documents
        return list(corpora.tfds_documents(name, split))
    return corpora.read_documents([p for p in corpus.split(",") if p], corpus_format)


class BertPretrainingSource:
    """Masked-LM (+ NSP) batches over one corpus; see the module docstring."""

    def __init__(
        self,
        corpus: str = "stdlib",
        corpus_format: str = "bert",
        vocab: str = "learn",
        vocab_size: int = 30522,
        lower_case: bool = True,
        nsp: bool = True,
        masked_lm_prob: float = 0.15,
        max_predictions_per_seq: int | None = None,
        short_seq_prob: float = 0.1,
        whole_word_masking: bool = False,
        masking: str = "dynamic",
        dupe_factor: int = 10,
        seed: int = 0,
    ):
        self.corpus_name, self.corpus_format = corpus, corpus_format
        self.vocab_spec, self.requested_vocab_size, self.lower_case = vocab, vocab_size, lower_case
        self.seed = seed
        self.options = dict(
            nsp=nsp,
            masked_lm_prob=masked_lm_prob,
            short_seq_prob=short_seq_prob,
            whole_word_masking=whole_word_masking,
            masking=masking,
            dupe_factor=dupe_factor,
        )
        self.max_predictions = max_predictions_per_seq
        self.vocab: WordPieceVocabulary | None = None
        self.corpus = None
        self._unsaved: dict[str, pathlib.Path] = {}

    @property
    def vocab_size(self) -> int:
        return self._vocab().vocab_size

    def prepare(self, workdir: str | pathlib.Path) -> None:
        """Read and check the corpus, then load or learn the vocabulary and tokenize."""
        documents = load_corpus(self.corpus_name, self.corpus_format)
        if not documents:
            raise corpora.CorpusError(
                f"corpus {self.corpus_name!r} has no documents: point "
                "bert_pretraining_source.corpus at text with one sentence per line"
            )
        self.vocab = self._load_or_learn_vocab(pathlib.Path(workdir), documents)
        self.corpus = tokenize_documents(documents, self.vocab)
        check_corpus(self.corpus, self.options["nsp"])
        logging.info(
            "corpus %s: %d documents, vocabulary of %d",
            self.corpus_name,
            self.corpus.num_documents,
            self.vocab.vocab_size,
        )

    def _load_or_learn_vocab(
        self, workdir: pathlib.Path, documents: list[list[str]]
    ) -> WordPieceVocabulary:
        if self.vocab_spec != "learn":
            if not pathlib.Path(self.vocab_spec).is_file():
                raise corpora.CorpusError(
                    f"vocabulary file {self.vocab_spec} not found: set "
                    "bert_pretraining_source.vocab to a vocab.txt path or 'learn'"
                )
            return WordPieceVocabulary(self.vocab_spec, lower_case=self.lower_case)
        path = workdir / LEARNED_VOCAB
        if not path.exists():  # learned into a staging directory; save() keeps it
            sentences = (s for doc in documents for s in doc)
            tokens = learn_vocabulary(sentences, self.requested_vocab_size, self.lower_case)
            path = pathlib.Path(tempfile.mkdtemp(prefix="bertjax-vocab-")) / LEARNED_VOCAB
            write_vocab(tokens, path)
            self._unsaved[LEARNED_VOCAB] = path
        return WordPieceVocabulary(str(path), lower_case=self.lower_case)

    def save(self, workdir: str | pathlib.Path) -> None:
        """Keep a newly learned vocabulary in the workdir (called once the run starts)."""
        for name, path in self._unsaved.items():
            pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, pathlib.Path(workdir) / name)
        self._unsaved = {}

    def _vocab(self) -> WordPieceVocabulary:
        if self.vocab is None:
            raise RuntimeError("call prepare(workdir) before reading batches")
        return self.vocab

    def config(self, seq_length: int) -> PretrainingConfig:
        predictions = self.max_predictions or default_max_predictions(
            seq_length, self.options["masked_lm_prob"]
        )
        return PretrainingConfig(
            max_seq_length=seq_length, max_predictions_per_seq=predictions, **self.options
        )

    def task(self, seq_length: int, block_size: int = 1) -> seqio.Task:
        """The registered seqio Task for this corpus at `seq_length`.

        Host shards are blocks of `block_size` examples (the per-host batch), so a global batch
        is the same for any number of hosts.
        """
        slug = re.sub(r"[^a-z0-9]+", "_", self.corpus_name.lower()).strip("_")[-40:]
        name = f"bertjax_pretrain_{slug}_{seq_length}"
        config = self.config(seq_length)
        return register_pretraining_task(name, self.corpus, self._vocab(), config, block_size)

    def batches(
        self, start_index: int, seq_length: int, batch_size: int
    ) -> Iterator[dict[str, np.ndarray]]:
        """This host's share of global batches from global example `start_index` on."""
        shard = seqio.ShardInfo(jax.process_index(), jax.process_count())
        if self.corpus_name.startswith("tfds:"):  # documents are already split per host
            shard, start_index = None, start_index // jax.process_count()
        dataset = self.task(seq_length, block_size=batch_size).get_dataset(
            split=f"train[{start_index}:]",
            shuffle=False,
            seed=self.seed,
            shard_info=shard,
            num_epochs=1,
            trim_output_features=False,
            try_in_mem_cache=False,
        )
        dataset = dataset.batch(batch_size, drop_remainder=True).prefetch(2)
        return dataset.as_numpy_iterator()
