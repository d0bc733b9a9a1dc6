"""Recorded inputs: an op's inputs captured from a running model, kept as a case's input file.

Seeded inputs are what numcheck makes up; a model's own activations are what a kernel
serves. :mod:`numcheck.recorded.record` captures an op's inputs while a model runs
(``numcheck.record_inputs``), :mod:`numcheck.recorded.files` writes and reads the file (one
safetensors file, a few recorded calls, size-limited), and a case names it
(``inputs.file = "..."``): its checks then run on those calls instead of generated inputs,
and its golden is made from them (the file's content hash pins it). Nothing is ever fetched:
the file is read from the disk, next to the case file. Ground floor: no numcheck imports.
"""
