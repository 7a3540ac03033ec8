"""Attention Is All You Need (Vaswani et al., 2017) in JAX and Flax.

Layers, each importing only those below it (`tests/test_layers.py`):
  the commands               this folder: train, translate, evaluate, sweep, export, ...; each
                             imports libraries and `cli` (the shared command line), no command
  loop/                      the training loop: steps, checkpoints, dev evaluations
  decoding/                  search, batch decoding, translator, bleu, dev_evaluation (the dev
                             split scored during training), scoring (`evaluate`'s figures)
  training/                  trainer, rows, optimizer, checkpointing, saved_config, feed, ...
  model/                     the Transformer, its loss, costs, placement on a mesh, Marian names
  data/                      corpora, vocabulary and batches
  storage/                   atomic writes, workdir locks, the provenance of results
  config/                    config files loaded, overridden, flattened and checked
"""
