"""The token store: a corpus tokenized once into memory-mapped shards of token ids.

    format.py   the on-disk layout (shards, their index, the manifest) and its validation
    reader.py   a store opened for reading: token ids by memory map, boundaries from the index
    build.py    building a store from a corpus and a vocabulary, in worker processes, resumable

A pretraining source reads a store when its corpus setting is `store:PATH`
(`bertjax.data.source.Source.prepare`); `bertjax-prepare` builds one.
"""
