"""Attention Is All You Need (Vaswani et al., 2017) in JAX and Flax.

Layers, each importing only those below it (`tests/test_layers.py`):
  the commands and tools     this folder: train, translate, evaluate, sweep, export, ...
  decoding/                  search, decoding, translator, bleu
  training/                  config_lib, trainer, rows, optimizer, checkpointing, feed, ...
  model/                     the Transformer, its loss, costs and placement on a mesh
  data/                      corpora, vocabulary and batches
  storage/                   atomic writes and workdir locks
"""
