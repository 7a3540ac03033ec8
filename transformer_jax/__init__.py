"""Attention Is All You Need (Vaswani et al., 2017) in JAX and Flax.

Layers, each importing only those below it (`tests/test_layers.py`):
  the commands               this folder: train, translate, evaluate, sweep, export, ...; each
                             imports libraries and `cli` (the shared command line), no command
  sweep/                     sweeps: rows planned, claimed, trained in groups side by side
  loop/                      the training loop: one run's story (train_loop), its runs (runs, group)
  decoding/                  search, batch decoding, translator, bleu, dev_evaluation (the dev
                             split scored during training), scoring (`evaluate`'s figures)
  training/                  trainer, together, optimizer, checkpointing, saved_config, feed, ...
  model/                     the Transformer, its loss, costs, placement on a mesh, Marian names
  data/                      corpora, vocabulary and batches
  storage/                   atomic writes, workdir locks, the provenance of results
  config/                    config files loaded, overridden, flattened and checked
"""

from transformer_jax.storage import buckets as _buckets

# Before any library that reaches Cloud Storage is imported.
_buckets.hand_on_emulator()
_buckets.use_fresh_listings()
