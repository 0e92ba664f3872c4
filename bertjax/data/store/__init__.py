"""The token store: a corpus tokenized once into memory-mapped shards of token ids.

    format.py   the on-disk layout (shards, their index, the manifest) and its validation
    reader.py   a store opened for reading: token ids by memory map, boundaries from the index
    build.py    building a store from a corpus and a vocabulary, resumable
    workers.py  the family sources that tokenize shards, and the worker processes they run in
    beam.py     the same build as an Apache Beam pipeline (DirectRunner, Dataflow)
    upload.py   a store built for gs://: staged on local disk, then uploaded
    lock.py     one build at a time per directory

A pretraining source reads a store when its corpus setting is `store:PATH`
(`bertjax.data.source.Source.prepare`); `bertjax-prepare` builds one.
"""
