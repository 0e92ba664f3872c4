"""Pretraining corpora as documents (lists of sentences): text files, the stdlib docs, TFDS.

A document is a list of sentences, the unit BERT's next-sentence pairs are drawn from.
Sources: files in google-research/bert's format (one sentence per line, a blank line
between documents) or plain text; `stdlib_documents`, an offline default corpus made of
the documentation every Python installation carries; and TFDS datasets such as
`wikipedia/20230601.en` for real runs.
"""

from __future__ import annotations

import ast
import functools
import glob
import hashlib
import os
import pathlib
import re
import sysconfig
from collections.abc import Iterable, Iterator, Sequence

from absl import logging

from bertjax import files
from bertjax.files import atomic_file

FORMATS = ("bert", "plain")


class CorpusError(ValueError):
    """A corpus that cannot be read; the message names the path or setting to fix."""


# ---------------------------------------------------------------- sentences

_BOUNDARY = re.compile(r"[.!?]+[\"'”’)\]]*\s+")
_ABBREVIATIONS = frozenset({"dr", "e.g", "etc", "i.e", "jr", "mr", "mrs", "ms", "prof", "sr", "st"})


def split_sentences(text: str) -> list[str]:
    """Splits text after . ! ? (and closing quotes/brackets) followed by whitespace.

    Not after common abbreviations or single initials, nor before a lower-case letter,
    so "e.g. this" and "J. R. Smith" stay whole.
    """
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(text):
        following = text[match.end() : match.end() + 1]
        last_word = text[start : match.start()].rsplit(None, 1)[-1:] or [""]
        word = last_word[0].lower().lstrip("(\"'")
        if following.islower() or word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


# ---------------------------------------------------------------- files


def resolve_paths(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[files.Path]:
    """Files named by paths (local or gs://): files as given, directories' *.txt files
    (sorted), glob matches."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    found: dict[str, files.Path] = {}  # ordered, without repeats
    for entry in paths:
        path = files.as_path(entry)
        if path.is_dir():
            matches = sorted(path.glob("*.txt"))
            if not matches:
                raise CorpusError(
                    f"{path}: directory has no *.txt files; fix the corpus setting"
                )
        elif path.is_file():
            matches = [path]
        else:
            matches = _glob(str(entry))
            if not matches:
                raise CorpusError(
                    f"{entry}: no such file, directory or glob match; fix the corpus setting"
                )
        found.update((str(match), match) for match in matches)
    return list(found.values())


def _glob(pattern: str) -> list[files.Path]:
    """The files a glob pattern matches, local or on object storage."""
    if files.is_remote(pattern):
        scheme = pattern.split("://", 1)[0]
        names = files.filesystem(pattern).glob(pattern)
        matches = [files.as_path(f"{scheme}://{name}") for name in sorted(names)]
    else:
        matches = [files.as_path(p) for p in sorted(glob.glob(pattern, recursive=True))]
    return [path for path in matches if path.is_file()]


def is_binary(data: bytes) -> bool:
    """True for bytes that are not text: they hold a NUL byte (executables, images, archives).

    The one rule every bertjax tool applies to its text inputs.
    """
    return b"\x00" in data


def _read_lines(path: files.Path) -> Iterator[str]:
    """Lines of a UTF-8 file, streamed (a corpus is never held as one string); bad bytes
    become U+FFFD with one warning naming the file."""
    bad = 0
    try:
        with path.open("rb") as stream:
            for raw in stream:
                if is_binary(raw):
                    raise CorpusError(
                        f"{path} is a binary file, not text: point the corpus setting at text")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    line, bad = raw.decode("utf-8", errors="replace"), bad + 1
                yield line.rstrip("\n").rstrip("\r")
    except OSError as e:
        raise CorpusError(
            f"{path}: cannot read ({e.strerror or e}); fix the corpus setting"
        ) from e
    if bad:
        logging.warning("%s: %d line(s) had invalid UTF-8 bytes, replaced by U+FFFD", path, bad)


def _blocks(lines: Iterable[str]) -> Iterator[list[str]]:
    """Runs of non-blank lines (stripped), split at blank lines."""
    block: list[str] = []
    for line in lines:
        line = line.strip()
        if line:
            block.append(line)
        elif block:
            yield block
            block = []
    if block:
        yield block


def iter_documents(
    paths: str | os.PathLike | Sequence[str | os.PathLike], fmt: str = "bert"
) -> Iterator[list[str]]:
    """`read_documents`, streamed: one document at a time, so a corpus of any size can be
    read in a bounded memory (the token store's build reads it so)."""
    if fmt not in FORMATS:
        raise CorpusError(f"corpus format {fmt!r} is not one of {FORMATS}; fix the format setting")
    files = resolve_paths(paths)
    if not files:
        raise CorpusError("no corpus paths given; set the corpus setting")
    found = False
    for path in files:
        for block in _blocks(_read_lines(path)):
            document = block if fmt == "bert" else split_sentences(" ".join(block))
            if document:
                found = True
                yield document
    if not found:
        names = ", ".join(str(p) for p in files[:3]) + (", ..." if len(files) > 3 else "")
        raise CorpusError(
            f"corpus is empty: no sentences in {names}; fix the corpus setting"
        )


def read_documents(
    paths: str | os.PathLike | Sequence[str | os.PathLike], fmt: str = "bert"
) -> list[list[str]]:
    """Documents from text files; paths may be files, directories (*.txt) or globs.

    fmt="bert": one sentence per line, blank line between documents (google-research/bert).
    fmt="plain": blank lines separate documents; lines are joined and split into sentences.
    """
    return list(iter_documents(paths, fmt))


def write_bert_format(documents: Iterable[Sequence[str]], path: str | os.PathLike) -> None:
    """Writes documents in bert format, atomically (temp file, then rename).

    Whitespace inside a sentence (newlines included) becomes single spaces, so each
    sentence stays on one line; empty sentences and documents are dropped.
    """
    with atomic_file(path) as f:
        for document in documents:
            lines = [line for line in (" ".join(s.split()) for s in document) if line]
            if lines:
                f.write("\n".join(lines) + "\n\n")


# ---------------------------------------------------------------- stdlib documentation

# Pure-python stdlib modules (the _py* ones are the documented reference implementations
# of C-accelerated modules). Their source is parsed, never imported: nothing runs, and
# docstrings are read as written, immune to monkey-patching by libraries already imported.
STDLIB_MODULES = (
    "_collections_abc", "_pydatetime", "_pydecimal", "_pyio", "_strptime", "_threading_local",
    "_weakrefset", "abc", "argparse", "ast", "asyncio.base_events", "asyncio.events",
    "asyncio.exceptions", "asyncio.futures", "asyncio.locks", "asyncio.protocols",
    "asyncio.queues", "asyncio.runners", "asyncio.streams", "asyncio.subprocess",
    "asyncio.tasks", "asyncio.transports", "base64", "bdb", "bisect", "calendar", "cmd", "code",
    "codecs", "codeop", "collections", "colorsys", "compileall", "concurrent.futures",
    "concurrent.futures._base", "concurrent.futures.process", "concurrent.futures.thread",
    "configparser", "contextlib", "copy", "copyreg", "csv", "dataclasses", "datetime",
    "difflib", "dis", "doctest", "email.charset", "email.contentmanager", "email.errors",
    "email.feedparser", "email.generator", "email.header", "email.headerregistry",
    "email.message", "email.mime.base", "email.mime.multipart", "email.mime.text",
    "email.parser", "email.policy", "email.utils", "enum", "filecmp", "fileinput", "fnmatch",
    "fractions", "ftplib", "functools", "getopt", "gettext", "glob", "graphlib", "gzip",
    "hashlib", "heapq", "hmac", "html", "html.parser", "http", "http.client", "http.cookiejar",
    "http.cookies", "http.server", "imaplib", "importlib", "importlib.abc",
    "importlib.machinery", "importlib.metadata", "importlib.resources", "importlib.util",
    "inspect", "io", "ipaddress", "json", "json.decoder", "json.encoder", "keyword",
    "linecache", "locale", "logging", "logging.config", "logging.handlers", "mailbox",
    "mimetypes", "modulefinder", "multiprocessing.connection", "multiprocessing.managers",
    "multiprocessing.pool", "multiprocessing.process", "multiprocessing.queues",
    "multiprocessing.shared_memory", "multiprocessing.synchronize", "netrc", "numbers",
    "operator", "optparse", "os", "pathlib", "pdb", "pickle", "pickletools", "pkgutil",
    "platform", "plistlib", "poplib", "posixpath", "pprint", "profile", "pstats", "py_compile",
    "pyclbr", "pydoc", "queue", "quopri", "random", "re", "reprlib", "rlcompleter", "runpy",
    "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "smtplib", "socket",
    "socketserver", "stat", "statistics", "string", "stringprep", "struct", "subprocess",
    "symtable", "sysconfig", "tabnanny", "tarfile", "tempfile", "textwrap", "threading",
    "timeit", "token", "tokenize", "tomllib", "trace", "traceback", "tracemalloc", "types",
    "typing", "unittest", "unittest.case", "unittest.loader", "unittest.mock",
    "unittest.result", "unittest.runner", "unittest.suite", "urllib.error", "urllib.parse",
    "urllib.request", "urllib.response", "urllib.robotparser", "uuid", "warnings", "wave",
    "weakref", "wsgiref.handlers", "wsgiref.headers", "wsgiref.simple_server", "wsgiref.util",
    "wsgiref.validate", "xml.dom", "xml.dom.minidom", "xml.dom.pulldom",
    "xml.etree.ElementTree", "xml.parsers.expat", "xml.sax", "xml.sax.handler",
    "xml.sax.saxutils", "xml.sax.xmlreader", "xmlrpc.client", "xmlrpc.server", "zipapp",
    "zipfile", "zipimport", "zoneinfo",
)  # fmt: skip

_ROLE = re.compile(r":[\w:.+-]+:`~?!?([^`<]*?)\s*(?:<[^`>]*>)?`")  # :func:`x` -> x
_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`_?")  # ``x`` / `x` -> x
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_UNDERLINE = re.compile(r"^\s*([=\-~^*#+`'\"])\1{2,}\s*$")
_LIST_MARKER = re.compile(r"^(?:\d+\.|[*\-•+]|\(\w\))\s+")
_DOCTEST = re.compile(r"^\s*(?:>>>|\.\.\.(?:\s|$))")
_NOT_LETTER_OR_SPACE = re.compile(r"[^\w\s]|[\d_]")
_DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _clean_markup(text: str) -> str:
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)
    return _BOLD.sub(r"\1", text)


def _is_prose(paragraph: str) -> bool:
    """True for sentence-like text, False for code, grammar rules, tables and headings."""
    words = paragraph.split()
    if len(words) < 3 or "::=" in paragraph or " at 0x" in paragraph:
        return False
    letters = len(_NOT_LETTER_OR_SPACE.sub("", paragraph))
    ends_like_a_sentence = paragraph.rstrip("\"'”’)")[-1:] in (".", "!", "?", ":")
    return ends_like_a_sentence and letters >= 0.8 * len(paragraph)


def _prose_sentences(text: str) -> list[str]:
    """Sentences of the prose paragraphs of reST-ish text (code, doctests, headings dropped)."""
    sentences: list[str] = []
    for block in re.split(r"\n\s*\n", text.expandtabs(8)):
        lines = [line for line in block.split("\n") if line.strip()]
        if not lines or any(_DOCTEST.match(line) for line in lines):
            continue
        indent = min(len(line) - len(line.lstrip()) for line in lines)
        if indent >= 8 or lines[0].lstrip().startswith(".. "):
            continue  # heavily indented (code) or a reST directive
        lines = [line for line in lines if not _UNDERLINE.match(line)]
        paragraph = _LIST_MARKER.sub("", " ".join(" ".join(lines).split()))
        paragraph = _clean_markup(paragraph)
        if paragraph.endswith("::"):
            paragraph = paragraph[:-1]
        if _is_prose(paragraph):
            sentences.extend(split_sentences(paragraph))
    return sentences


@functools.cache
def _module_docstrings(name: str) -> tuple[str, ...]:
    """Docstrings of a stdlib module's source: the module's, then its public classes' (each
    followed by its public methods') and functions', in source order; [] if not shipped."""
    base = pathlib.Path(sysconfig.get_path("stdlib"), *name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            break
    else:
        return ()
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return ()
    nodes: list[ast.AST] = [tree]
    for node in tree.body:
        if isinstance(node, _DEFINITIONS) and not node.name.startswith("_"):
            nodes.append(node)
            if isinstance(node, ast.ClassDef):
                nodes.extend(
                    n
                    for n in node.body
                    if isinstance(n, _DEFINITIONS) and not n.name.startswith("_")
                )
    docs = (ast.get_docstring(n, clean=True) for n in nodes)
    return tuple(d for d in docs if d and d.strip())


HELD_OUT_EVERY = 25  # every 25th stdlib document is held out of training


def stdlib_documents(part: str = "train") -> list[list[str]]:
    """The offline default corpus: Python's own documentation, about 1 MB of English prose.

    One document per pydoc topic (`pydoc_data.topics`) and per module of `STDLIB_MODULES`
    (its docstrings), keeping prose sentences only and documents of >= 2 sentences.
    Deterministic for a given Python version; a docstring repeated verbatim is kept once.
    `part` "train" leaves out every HELD_OUT_EVERY-th document, which "held_out" returns (the
    demo measures masked-LM accuracy on them); "all" returns every document.
    """
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions package pydoc_data separately
        topics = {}
    texts = [topics[key] for key in sorted(topics)]
    seen: set[str] = set()
    for name in STDLIB_MODULES:
        docs = [d for d in _module_docstrings(name) if d not in seen]
        seen.update(docs)
        texts.append("\n\n".join(docs))
    documents = [_prose_sentences(text) for text in texts]
    documents = [document for document in documents if len(document) >= 2]
    held_out = {i for i in range(len(documents)) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1}
    if part == "all":
        return documents
    if part not in ("train", "held_out"):
        raise CorpusError(f"stdlib corpus part {part!r}: use 'stdlib' or 'stdlib:held_out'")
    return [d for i, d in enumerate(documents) if (i in held_out) == (part == "held_out")]


def documents_digest(documents: Iterable[Sequence[str]]) -> str:
    """A short content hash of documents, to check a corpus is what a run expects."""
    digest = hashlib.sha256()
    for document in documents:
        digest.update("\n".join(document).encode("utf-8") + b"\n\n")
    return digest.hexdigest()[:16]


# ---------------------------------------------------------------- TFDS


def tfds_documents(
    name: str,
    split: str,
    text_key: str = "text",
    data_dir: str | None = None,
    download: bool = False,
) -> Iterator[list[str]]:
    """Documents from a TFDS text dataset (e.g. "wikipedia/20230601.en"), one per example.

    The example's `text_key` feature is split into lines (paragraphs) and sentences.
    `download=False` by default: corpora such as Wikipedia are prepared beforehand
    (`tfds build` or a shared `data_dir`), not on the training host.
    """
    import tensorflow_datasets as tfds  # heavy: imported only when a TFDS corpus is used

    try:
        dataset = tfds.load(
            name, split=split, data_dir=data_dir, download=download, shuffle_files=False
        )
    except (ValueError, AssertionError, OSError) as e:  # not found / not prepared / bad split
        reason = " ".join(str(e).split())[:300]
        raise CorpusError(
            f"TFDS corpus {name!r} split {split!r} (data_dir={data_dir}): {reason}; "
            "fix the corpus name/data_dir settings or prepare it with `tfds build`"
        ) from e
    if text_key not in dataset.element_spec:
        keys = sorted(dataset.element_spec)
        raise CorpusError(
            f"TFDS corpus {name!r} has no feature {text_key!r} (has {keys}); fix text_key"
        )
    for example in tfds.as_numpy(dataset):
        text = example[text_key].decode("utf-8", errors="replace")
        document = [s for line in text.split("\n") for s in split_sentences(line.strip())]
        if document:
            yield document
