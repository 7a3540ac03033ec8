"""What a run of a config uses on a platform before it runs: its settings, batch shapes,
schedule, and the disk its workdir holds at the end of training.

The settings are those `platforms` resolves there; `python -m transformer_jax.summary
--platform=...` prints them.

  settings = footprint.settings(config, 'gpu', devices=8)

The workdir's bytes are computed from the parameter count, not measured: each kept checkpoint's
parameters (float32), the optimizer state of those kept whole (`checkpointing`: Adam's two
moments, from optax's own state shapes), and the training split's token ids (`token_store`),
from the dataset's pair count and `TOKENS_PER_SIDE`, an assumed mean for a byte-pair vocabulary
of tens of thousands, since the corpus is not read. Orbax's metadata, the vocabulary and the
metrics log add a few megabytes at most.
"""

import json
import math

import jax
import ml_collections
import numpy as np

from transformer_jax.config import platforms
from transformer_jax.data import batching, pipeline
from transformer_jax.model import costs, model_config
from transformer_jax.training import checkpointing, optimizer

# Training pairs of each corpus with a known size: TFDS's train splits; Multi30k task 1.
TRAIN_PAIRS = {'wmt14_translate/de-en': 4_508_785, 'wmt14_translate/fr-en': 40_836_876,
               'multi30k': 29_000}
TOKENS_PER_SIDE = 30  # assumed mean token ids a side of a pair, EOS included
_LENGTH_BYTES = 8  # the token store's lengths: a source and a target int32 a pair


def settings(config: ml_collections.ConfigDict, platform: str, devices: int) -> dict:
  """The settings a run of a valid `config` resolves on `platform` with `devices` devices (the
  batch shards, without FSDP or tensor parallelism), and its workdir's bytes at the end of
  training."""
  config = platforms.resolved(config, platform)
  train = config.train
  sequences_multiple = devices * train.grad_accum_steps
  tokens = config.data.tokens_per_batch
  batch = lambda length: [batching.sequences_per_batch(tokens, length, sequences_multiple), length]
  pack_length = pipeline.pack_length(config, platform)
  buckets = batching.bucket_lengths(config.data.max_length, pipeline.buckets(config, platform))
  train_lengths = ([pack_length] + [b for b in buckets if b > pack_length] if pack_length
                   else buckets)
  k = train.steps_per_call if len(train_lengths) == 1 else 1
  disk = workdir_bytes(config)
  return {
      'platform': platform, 'devices': devices, 'dtype': config.dtype,
      'dropout_prng_impl': train.dropout_prng_impl, 'loss_chunk': train.loss_chunk,
      'steps_per_call': k, 'packed': bool(pack_length),
      'train_batch_shapes': [batch(length) for length in train_lengths],
      'eval_batch_shapes': [batch(length) for length in buckets],
      'eval_every_steps': train.eval_every_steps,
      'bleu_every_steps': train.bleu_every_steps if train.eval_bleu else None,
      'beam_size': config.decode.beam_size,
      'checkpoint_every_steps': train.checkpoint_every_steps, **disk}


# {a model's shaping fields: (bytes of its parameters, of Adam's state)}: a table of many
# configs and platforms traces each model once.
_STATE_BYTES: dict[str, tuple[int, int]] = {}


def _state_bytes(config: ml_collections.ConfigDict) -> tuple[int, int]:
  """The bytes of `config`'s parameters and of Adam's state for them, from their shapes (which
  neither the rates of dropout, LayerDrop and DropHead nor Adam's hyper-parameters change)."""
  shaping = {name: value for name, value in config.model.to_dict().items()
             if not name.endswith('_rate')}
  key = json.dumps([shaping, config.data.vocab_size], sort_keys=True)
  if key not in _STATE_BYTES:
    params = costs.abstract_params(model_config.from_config(config))
    adam = jax.eval_shape(optimizer.adam(config).init, params)
    nbytes = lambda tree: sum(math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize
                              for leaf in jax.tree.leaves(tree))
    _STATE_BYTES[key] = nbytes(params), nbytes(adam)
  return _STATE_BYTES[key]


def saved_steps(config: ml_collections.ConfigDict) -> list[int]:
  """The steps a run saves from step 0 to the end: each multiple of the checkpoint interval,
  and the last."""
  train = config.train
  every = train.checkpoint_every_steps
  return sorted(set(range(every, train.num_train_steps + 1, every)) | {train.num_train_steps})


def workdir_bytes(config: ml_collections.ConfigDict, thinned: bool = True) -> dict:
  """The bytes a resolved `config`'s workdir holds at the end of training: checkpoints kept as
  `checkpointing` keeps them, and the training split's token ids, whose corpus size is known
  (`TRAIN_PAIRS`; 0 otherwise, or where they are read from `data.prepared`). With `thinned` False, checkpoints as they were kept before
  issue 107: the last `keep_checkpoints` scheduled ones and the newest, every one whole."""
  train = config.train
  steps = saved_steps(config)
  if thinned:
    policy = checkpointing.KeepScheduled(train.keep_checkpoints, train.checkpoint_every_steps)
    kept = [step for step, keep in zip(steps, policy.kept(steps)) if keep]
    whole = len(policy.full(kept))
  else:
    scheduled = [step for step in steps if step % train.checkpoint_every_steps == 0]
    kept = sorted(set(scheduled[-train.keep_checkpoints:]) | {steps[-1]})
    whole = len(kept)
  params_bytes, adam_bytes = _state_bytes(config)
  checkpoint_bytes = len(kept) * params_bytes + whole * adam_bytes
  # A run reading `data.prepared` keeps no token ids in its workdir.
  pairs = 0 if config.data.prepared else TRAIN_PAIRS.get(config.data.dataset, 0)
  id_bytes = 2 if config.data.vocab_size <= 2**16 else 4
  token_bytes = pairs * (2 * TOKENS_PER_SIDE * id_bytes + _LENGTH_BYTES)
  return {'checkpoints_kept': len(kept), 'checkpoints_whole': whole,
          'checkpoint_bytes': checkpoint_bytes, 'token_bytes': token_bytes,
          'workdir_bytes': checkpoint_bytes + token_bytes}
