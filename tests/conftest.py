"""Shared helpers: a tiny model config and its parameters, a small training config.

The suite runs with 8 CPU devices, so that the sharding tests can build real meshes; every
other test uses the default (first) device.
"""

import os
import socket
import sys

# Before jax is imported.
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8').strip()

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from transformer_jax import config_lib
from transformer_jax.model import Transformer
from transformer_jax.model_config import TransformerConfig

base = config_lib.import_sibling(__file__, '../configs/base')


def tiny_config(**changes) -> TransformerConfig:
  """A small model with d_k != d_v and d_model not a multiple of h·d_k, so that no formula can
  silently assume d_k = d_v = d_model / h. Dropout is off unless asked for."""
  defaults = dict(vocab_size=23, num_layers=2, d_model=12, d_ff=20, num_heads=3, d_k=5, d_v=7,
                  dropout_rate=0.0, deterministic=True, max_len=16)
  return TransformerConfig(**{**defaults, **changes})


def init_params(cfg: TransformerConfig, seed: int = 0):
  """Unboxed float32 parameters of `Transformer(cfg)`."""
  tokens = jnp.ones((1, 4), jnp.int32)
  variables = Transformer(cfg).init(
      {'params': jax.random.key(seed), 'dropout': jax.random.key(seed + 1)}, tokens, tokens)
  return nn.unbox(variables['params'])


def perturbed(params, rng: np.random.Generator, scale: float = 0.1):
  """`params` with normal(0, scale) noise added to every leaf, so that parameters initialised
  to constants (layer-norm gains 1, biases 0) take part in a comparison as any others."""
  return jax.tree.map(lambda p: p + scale * rng.standard_normal(p.shape).astype(p.dtype), params)


def random_tokens(rng: np.random.Generator, shape, vocab_size: int, lengths=None) -> np.ndarray:
  """Token ids in [1, vocab_size); positions at or after `lengths[b]` are padding (0)."""
  tokens = rng.integers(1, vocab_size, size=shape)
  if lengths is not None:
    tokens = np.where(np.arange(shape[1])[None, :] < np.asarray(lengths)[:, None], tokens, 0)
  return tokens.astype(np.int32)


@pytest.fixture
def rng() -> np.random.Generator:
  return np.random.default_rng(0)


# A model small enough to train in seconds, with every parameter dimension splitting 8 ways.
SMALL = {
    'data.dataset': 'builtin', 'data.vocab_size': 64, 'data.max_length': 32,
    'data.tokens_per_batch': 512, 'model.num_layers': 1, 'model.d_model': 32, 'model.d_ff': 64,
    'model.num_heads': 8, 'model.d_k': 4, 'model.d_v': 4, 'train.warmup_steps': 10,
}


def train_config(**overrides) -> ml_collections.ConfigDict:
  """The base recipe with SMALL's and then `overrides`' flattened fields
  ({'model.d_ff': 64}) replaced."""
  config = base.get_config()
  config.update_from_flattened_dict({**SMALL, **overrides})
  return config


def short_run(tfds_data_dir, steps: int = 12) -> dict:
  """Overrides of a `steps`-step run on the built-in corpus with a checkpoint every 4 steps
  (the last 2 kept), logging every step, and a short dev evaluation at the end."""
  return {
      'data.tfds_data_dir': str(tfds_data_dir), 'data.vocab_size': 256,
      'data.max_length': 16, 'data.tokens_per_batch': 256, 'train.num_train_steps': steps,
      'train.log_every_steps': 1, 'train.eval_every_steps': steps, 'train.num_eval_steps': 2,
      'train.checkpoint_every_steps': 4, 'train.keep_checkpoints': 2,
  }


def assert_trained_alike(got, want) -> None:
  """Two trainings' parameter or optimizer-state leaves, equal but for float rounding. Adam
  divides a gradient by its own size, so where a gradient is near 0 its rounding moves the
  coordinate by up to a fraction of a step's learning rate: the same run on two meshes differs
  by 2.6e-5 after one step (the first step's rate being 5.6e-3). Hence a bound on the largest
  difference relative to the leaf's scale, and a far tighter one on the mean."""
  scale = max(float(np.max(np.abs(want))), 1e-6)
  error = np.abs(np.asarray(got, np.float64) - want)
  assert error.max() <= 2e-3 * scale and error.mean() <= 2e-5 * scale, (error.max(), scale)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_command(overrides: dict, workdir) -> list[str]:
  """`python -m transformer_jax.train` of `train_config(**overrides)`, run from REPO."""
  return ([sys.executable, '-m', 'transformer_jax.train', '--config=configs/base.py',
           f'--workdir={workdir}'] +
          [f'--config.{name}={value}' for name, value in {**SMALL, **overrides}.items()])


def two_process_commands(overrides: dict, workdir) -> list[list[str]]:
  """The commands of one run over two processes that find each other on a free local port."""
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
  return [train_command({**overrides, 'parallel.distributed': True, 'parallel.num_processes': 2,
                         'parallel.process_id': i,
                         'parallel.coordinator_address': f'127.0.0.1:{port}'}, workdir)
          for i in range(2)]


def text_of_max_length(translator) -> str:
  """A source text of exactly `config.data.max_length` tokens (EOS included) for `translator`:
  the shortest run of 'a's that reaches it, so not one that `encode` truncated to it."""
  return next(text for text in (' '.join(['a'] * k) for k in range(1, 200))
              if len(translator.encode([text])[0]) == translator.config.data.max_length)
