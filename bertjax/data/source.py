"""The data-source base every family's source builds on: corpus, vocabulary, batches.

A family's source (`bert.source.BertPretrainingSource`, `gpt.source.LmPretrainingSource`,
`elmo.source.ElmoSource`) subclasses `Source` and brings only what is its own:

    setting, task_prefix        its gin name (every error message names it) and task name
    vocab_kind, vocab_files     "wordpiece" | "bpe" | "words", and {role: file name}
    learn_vocab, load_vocab     learn files from the corpus into a directory; read them back
                                as the family's tokenizer (`vocab`)
    seqio_vocabulary            the name of the tokenizer's seqio vocabulary class in
                                data/vocabularies.py (imported with seqio, when a task is built)
    read_documents              optional: the corpus's documents (load_documents by default)
    corpus_view, encode         its view of the documents (shared by learning and encoding);
                                tokenize that view into its in-memory corpus
    feature_spec, examples      one example's {name: (shape, dtype)}; the pure generator of
                                examples, a function of (seed, global index)
    example_blocks              optional: the same examples in blocks (a leading example
                                axis), for a family that builds many at once
    id_features                 the features that hold token ids of its vocabulary

Corpora: "stdlib" (offline: the Python standard library's documentation; "stdlib:held_out" its
documents held out of training), comma-separated
files, directories or globs (google-research/bert's format or plain text),
"tfds:NAME[:SPLIT]", of which each host reads its own share, or "store:PATH", a token store
(`bertjax.data.store`, built once by bertjax-prepare): `prepare` then opens its memory-mapped
ids and reads no text and tokenizes nothing; the vocabulary is the store's own (a given one
must be the same files), and the examples are those of the corpus it was built from.

Vocabulary: "learn" (from the corpus, capped at `vocab_size`; a resumed run finds the files in
its workdir and reuses them; a multi-host run refuses, since each host reads other documents)
or given files (a directory holding them, or their comma-separated paths). `prepare(workdir)`
writes nothing: a learned vocabulary waits in a private staging directory until `save(workdir)`,
called once the run can start, copies it (or the given files) into the workdir, so a workdir is
self-contained and a run that fails validation leaves it untouched.

Batches: with TensorFlow and seqio installed, each source's examples are a registered seqio Task
read through tf.data (`bertjax.data.seqio_tasks`, where the split "train[N:]" starts at global
example N and a `seqio.ShardInfo` selects a host's examples); on a host with JAX alone (an
accelerator image) the same batches come from Python (`bertjax.data.python_batches`), and
BERT's text is tokenized by the same WordPiece in Python instead of tf.data (slower: a token
store built elsewhere is the way to bring a large corpus there).
"""

from __future__ import annotations

import functools
import importlib
import itertools
import logging
import os
import pathlib
import re
import tempfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from bertjax import files
from bertjax.data import corpora
from bertjax.data.store.format import Chunk, StoreError, vocabulary_digest

if TYPE_CHECKING:
    import seqio

    from bertjax.data.store.reader import TokenStore
    from bertjax.data.vocabularies import Tokenizer, TokenizerVocabulary

Example = dict[str, np.ndarray]
FeatureSpec = dict[str, tuple[tuple[int, ...], type]]
STORE_PREFIX = "store:"  # corpus "store:PATH": a token store built by bertjax-prepare


class DataError(ValueError):
    """A corpus, vocabulary or batch layout a source cannot serve; the message names the fix."""


def load_documents(corpus: str, corpus_format: str = "bert", text_key: str = "text"
                   ) -> list[list[str]]:
    """Documents (lists of sentences) of a corpus setting; see the module docstring."""
    if corpus == "stdlib" or corpus.startswith("stdlib:"):
        return corpora.stdlib_documents(corpus.partition(":")[2] or "train")
    if corpus.startswith("tfds:"):
        name, _, split = corpus[len("tfds:"):].partition(":")
        split = split or "train"
        if jax.process_count() > 1:
            split = f"{split}[{jax.process_index()}shard]"  # each host reads its own documents
        return list(corpora.tfds_documents(name, split, text_key))
    return corpora.read_documents([p for p in corpus.split(",") if p], corpus_format)


def stream_documents(corpus: str, corpus_format: str = "bert", text_key: str = "text"
                     ) -> Iterator[list[str]]:
    """The documents of `load_documents`, one at a time (a TFDS corpus: its whole split, on
    one host), for readers that must not hold a whole corpus: the token store's build."""
    if corpus == "stdlib" or corpus.startswith("stdlib:"):
        return iter(corpora.stdlib_documents(corpus.partition(":")[2] or "train"))
    if corpus.startswith("tfds:"):
        name, _, split = corpus[len("tfds:"):].partition(":")
        return corpora.tfds_documents(name, split or "train", text_key)
    if corpus.startswith(STORE_PREFIX):
        raise corpora.CorpusError(f"{corpus} is a token store, not text: give the corpus it "
                                  "was built from")
    return corpora.iter_documents([p for p in corpus.split(",") if p], corpus_format)


class Source:
    """What the training loop consumes (bertjax.training.data_source.DataSource): prepare,
    save, vocab_size, feature_spec, batches, padded_length, corpus_name."""

    setting = ""  # the gin name, e.g. "bert_pretraining_source"
    corpus_name: str | None = None  # the corpus setting, set by __init__
    task_prefix = ""
    vocab_kind = ""
    vocab_files: dict[str, str] = {}
    id_features: tuple[str, ...] = ()
    seqio_vocabulary = ""  # the seqio task's view of `vocab`: a class of data/vocabularies.py

    def __init__(self, corpus: str, corpus_format: str, vocab: str, vocab_size: int, seed: int,
                 text_key: str = "text") -> None:
        self.corpus_name, self.corpus_format, self.text_key = corpus, corpus_format, text_key
        self.vocab_spec, self.max_vocab_size, self.seed = vocab, vocab_size, seed
        self.vocab: Any = None  # the family's tokenizer (bertjax.tokenizers), once prepared
        self._files: dict[str, pathlib.Path] = {}
        self._staging: tempfile.TemporaryDirectory | None = None

    # ---------------------------------------------------------------- the family's part

    def read_documents(self) -> list[list[str]]:
        """The corpus setting's documents (`load_documents`); a family may note more."""
        return load_documents(self.corpus_name, self.corpus_format, self.text_key)

    def corpus_view(self, documents: list[list[str]]) -> Sequence:
        """What vocabulary learning and encoding read; the documents themselves by default."""
        return documents

    def learn_vocab(self, view: Sequence, vocab_size: int, directory: pathlib.Path) -> None:
        """Learn at most `vocab_size` tokens and write `vocab_files` into `directory`."""
        raise NotImplementedError

    def load_vocab(self, files: dict[str, pathlib.Path]) -> Tokenizer:
        """The tokenizer of `files` ({role: path})."""
        raise NotImplementedError

    def encode(self, view: Sequence) -> None:
        """Tokenize the corpus view into the in-memory corpus `examples` reads."""
        raise NotImplementedError

    def feature_spec(self, seq_length: int, batch_size: int) -> FeatureSpec:
        """{name: (shape, dtype)} of one example."""
        raise NotImplementedError

    def examples(self, seq_length: int, batch_size: int, start_index: int, shard_index: int,
                 shard_count: int) -> Iterator[Example]:
        """This shard's examples from global index `start_index` on, endlessly."""
        raise NotImplementedError

    def example_blocks(self, seq_length: int, batch_size: int, start_index: int,
                       shard_index: int, shard_count: int) -> Iterator[Example]:
        """`examples` in blocks of `batch_size` (a leading example axis), the unit tf.data takes.

        A family whose generator builds many examples at once overrides this.
        """
        examples = self.examples(seq_length, batch_size, start_index, shard_index, shard_count)
        while chunk := list(itertools.islice(examples, batch_size)):
            yield {key: np.stack([e[key] for e in chunk]) for key in chunk[0]}

    def tokenizer_options(self) -> dict[str, Any]:
        """Family options the tokenizer record keeps (e.g. lower_case)."""
        return {}

    # A token store (bertjax.data.store) of this family's ids: `encode_documents` gives what
    # a shard holds, `from_store` sets the in-memory corpus `examples` reads from an open store.
    store_family = ""  # "bert" | "gpt" | "elmo": the family a store records

    def store_options(self) -> dict[str, Any]:
        """The settings that change this family's ids: a store records them, a run matches."""
        return {}

    def store_id_bound(self) -> int | None:
        """Every id a store holds is below this (None: no bound known in advance)."""
        return self.vocab_size

    def encode_documents(self, documents: list[list[str]]) -> Chunk:
        """The ids of a run of documents (every one kept, even without text), as `encode`
        would give them, for one shard of a store."""
        raise NotImplementedError

    def from_store(self, store: TokenStore) -> None:
        """Set the in-memory corpus `examples` reads from an opened store (no copy of ids)."""
        raise NotImplementedError

    @property
    def documents_per_host(self) -> bool:
        """True when each host reads its own documents (TFDS corpora), so nothing is sharded."""
        return self.corpus_name.startswith("tfds:")

    def row_facts(self) -> dict[str, Any]:
        """Nothing beyond the batch size and corpus: a row is one sequence (BERT's packed rows
        say more)."""
        return {}

    # ---------------------------------------------------------------- shared

    @property
    def vocab_size(self) -> int:
        return self._vocab().vocab_size

    @property
    def store_path(self) -> str | None:
        """The token store the corpus setting names ("store:PATH"), else None."""
        if self.corpus_name and self.corpus_name.startswith(STORE_PREFIX):
            return self.corpus_name[len(STORE_PREFIX):]
        return None

    def prepare(self, workdir: str | os.PathLike) -> None:
        """Read the corpus, load or learn the vocabulary and encode; nothing is written."""
        if self.store_path is not None:
            return self._prepare_from_store(files.as_path(workdir))
        try:
            documents = self.read_documents()
        except corpora.CorpusError as e:
            raise corpora.CorpusError(f"{self.setting}.corpus: {e}") from None
        view = self.corpus_view(documents)
        if not view:
            raise DataError(f"corpus {self.corpus_name!r} has no text: point "
                            f"{self.setting}.corpus at some")
        self._load_or_learn(files.as_path(workdir), view)
        self.encode(view)
        logging.info("%s: corpus %s, %d documents, vocabulary of %d", self.setting,
                     self.corpus_name, len(documents), self.vocab_size)

    def _prepare_from_store(self, workdir: files.Path) -> None:
        """Open the token store, check it holds this family's ids for this run's settings and
        vocabulary (one line each), and read its vocabulary files."""
        from bertjax.data.store import reader  # numpy only; imported when a store is used

        path = self.store_path
        try:
            store = reader.open_store(path)
            stored = store.tokenizer_files()
        except (StoreError, OSError) as e:
            raise DataError(f"{self.setting}.corpus: {e}") from None
        manifest = store.manifest
        if manifest.family != self.store_family:
            raise DataError(f"{path} holds {manifest.family} ids, not {self.store_family}: "
                            f"point {self.setting}.corpus at a store built with "
                            f"bertjax-prepare --family={self.store_family}")
        for name, value in self.store_options().items():
            if manifest.options.get(name) != value:
                raise DataError(f"{path} was built with {name}={manifest.options.get(name)!r} "
                                f"but {self.setting}.{name} is {value!r}: set it to match, or "
                                f"rebuild the store with bertjax-prepare")
        if (self.vocab_spec != "learn"
                and vocabulary_digest(self._given_files()) != manifest.tokenizer_digest):
            raise DataError(f"{path} was tokenized with another vocabulary than "
                            f"{self.setting}.vocab={self.vocab_spec}: set it to 'learn' (the "
                            "store's own) or to the files the store was built with, or rebuild "
                            "the store with bertjax-prepare --vocab=" + self.vocab_spec)
        kept = {role: workdir / name for role, name in self.vocab_files.items()}
        if all(p.is_file() for p in kept.values()) and vocabulary_digest(
                {role: files.local_copy(p) for role, p in kept.items()}
        ) != manifest.tokenizer_digest:
            raise DataError(f"{workdir} was trained with another vocabulary than the token "
                            f"store {path} holds: use a new --workdir or that run's corpus")
        self._files = stored
        self.vocab = self.load_vocab(stored)
        self.from_store(store)
        counts = manifest.counts()
        logging.info("%s: token store %s, %d documents, %d tokens, vocabulary of %d",
                     self.setting, path, counts["documents"], counts["tokens"], self.vocab_size)

    def _load_or_learn(self, workdir: files.Path, view: Sequence) -> None:
        kept = {role: workdir / name for role, name in self.vocab_files.items()}
        resumed = all(path.is_file() for path in kept.values())
        if resumed:  # tokenizers read local files: a workdir on object storage is downloaded
            kept = {role: files.local_copy(path) for role, path in kept.items()}
        if self.vocab_spec != "learn":
            self._files = self._given_files()
            self.vocab = self.load_vocab(self._files)
            if resumed and self.load_vocab(kept) != self.vocab:
                raise DataError(f"{workdir} was trained with another vocabulary than "
                                f"{self.vocab_spec}: use a new --workdir or the run's own "
                                f"{self.setting}.vocab")
            return
        if resumed:  # a resumed run keeps the ids it trained with
            self._files = kept
        elif jax.process_count() > 1 and self.corpus_name.startswith("tfds:"):
            # each host reads its own share of a TFDS corpus, so each would learn another one
            raise DataError(f"a multi-host run cannot learn its vocabulary from a TFDS corpus: "
                            f"learn it once on one host and set {self.setting}.vocab to the files "
                            "it wrote")
        else:
            self._staging = tempfile.TemporaryDirectory(prefix="bertjax-vocab-")
            staging = pathlib.Path(self._staging.name)
            self.learn_vocab(view, self.max_vocab_size, staging)
            self._files = {role: staging / name for role, name in self.vocab_files.items()}
        self.vocab = self.load_vocab(self._files)

    def use_given_vocab(self) -> dict[str, pathlib.Path]:
        """Load the given vocabulary files (the vocab setting), without a workdir, for tools
        that tokenize with a run's vocabulary (bertjax-prepare); {role: local path} of them."""
        self._files = self._given_files()
        self.vocab = self.load_vocab(self._files)
        return dict(self._files)

    def _given_files(self) -> dict[str, pathlib.Path]:
        """Given files (local or gs://): a directory holding them, or their comma-separated
        paths; local copies of those on object storage."""
        names = list(self.vocab_files.values())
        paths = [files.as_path(p.strip()) for p in self.vocab_spec.split(",")]
        if len(paths) == 1 and paths[0].is_dir():
            paths = [paths[0] / name for name in names]
        if len(paths) != len(names) or not all(path.is_file() for path in paths):
            raise DataError(f"vocabulary {self.vocab_spec!r} not found: set {self.setting}.vocab "
                            f"to 'learn', a directory holding {' and '.join(names)}, or the "
                            f"path{'s' if len(names) > 1 else ''} {','.join(names)}")
        return dict(zip(self.vocab_files, map(files.local_copy, paths), strict=True))

    def save(self, workdir: str | os.PathLike) -> dict[str, Any]:
        """Copy the vocabulary into the workdir (host 0) and give the record's tokenizer part."""
        if not self._files:
            raise RuntimeError("call prepare(workdir) before save(workdir)")
        workdir = files.as_path(workdir)
        if jax.process_index() == 0:
            workdir.mkdir(parents=True, exist_ok=True)
            for role, path in self._files.items():
                target = workdir / self.vocab_files[role]
                same = (not files.is_remote(target) and target.exists()
                        and os.path.samefile(target, path))
                if not same:
                    files.copy(path, target)
            if self._staging is not None and not files.is_remote(workdir):
                # the workdir now holds the learned files
                self._files = {role: pathlib.Path(workdir / name)
                               for role, name in self.vocab_files.items()}
                self._staging.cleanup()
                self._staging = None
        return {"kind": self.vocab_kind, "files": dict(self.vocab_files),
                "vocab_size": self.vocab_size, **self.tokenizer_options()}

    def padded_length(self, batch: dict[str, np.ndarray], seq_length: int) -> int:
        """Every batch is padded to the phase's sequence length."""
        return seq_length

    def _vocab(self) -> Any:
        if self.vocab is None:
            raise RuntimeError("call prepare(workdir) before reading batches")
        return self.vocab

    def task(self, seq_length: int, batch_size: int = 1) -> seqio.Task:
        """The registered seqio Task for this corpus at `seq_length` (per-host `batch_size`)."""
        from bertjax.data import seqio_tasks, vocabularies  # noqa: PLC0415 - seqio, TF

        slug = re.sub(r"[^a-z0-9]+", "_", self.corpus_name.lower()).strip("_")[-40:]
        name = f"bertjax_{self.task_prefix}_{slug}_{seq_length}_{batch_size}"
        generate = functools.partial(self.example_blocks, seq_length, batch_size)
        source = seqio_tasks.ExampleSource(generate, self.feature_spec(seq_length, batch_size))
        vocabulary: type[TokenizerVocabulary] = getattr(vocabularies, self.seqio_vocabulary)
        return seqio_tasks.register_task(name, source, vocabulary(self._vocab()),
                                         self.id_features)

    def batches(self, start_index: int, seq_length: int, batch_size: int
                ) -> Iterator[dict[str, np.ndarray]]:
        """This host's share of global batches from global example `start_index` on: through
        the seqio task where TensorFlow and seqio are installed, else from Python (the same
        batches; see the module docstring)."""
        shard = (jax.process_index(), jax.process_count())
        if self.documents_per_host:  # documents are already split per host
            shard, start_index = (0, 1), start_index // jax.process_count()
        if has_tf_data():
            from bertjax.data import seqio_tasks  # noqa: PLC0415 - seqio and TensorFlow

            return seqio_tasks.task_batches(self.task(seq_length, batch_size), start_index,
                                            shard, self.seed, batch_size)
        from bertjax.data import python_batches  # noqa: PLC0415

        blocks = self.example_blocks(seq_length, batch_size, start_index, *shard)
        return python_batches.prefetched(python_batches.rebatch(blocks, batch_size))


@functools.cache
def has_tf_data() -> bool:
    """True where TensorFlow and seqio can be imported (the seqio path reads batches)."""
    try:
        for name in ("tensorflow", "seqio"):
            importlib.import_module(name)
    except ImportError:
        return False
    return True
