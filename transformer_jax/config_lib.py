"""Checks an ml_collections config and turns its model section into a `TransformerConfig`.

Configs live in `configs/` (documented field by field in `configs/base.py`). `validate` runs
before any long work starts and names the offending field in its error.
"""

import sys

from absl import app, flags, logging
import jax.numpy as jnp
import ml_collections

from transformer_jax.data import preprocessing
from transformer_jax.model_config import TransformerConfig

_POSITIVE_INTS = (
    'model.num_layers', 'model.d_model', 'model.d_ff', 'model.num_heads', 'model.d_k',
    'model.d_v', 'model.max_len', 'data.vocab_size', 'data.tokens_per_batch', 'data.max_length',
    'data.max_corpus_chars',
    'train.num_train_steps', 'train.warmup_steps', 'train.grad_accum_steps',
    'train.log_every_steps', 'train.eval_every_steps', 'train.checkpoint_every_steps',
    'train.keep_checkpoints', 'decode.beam_size', 'decode.average_last',
)
_MESH_AXES = ('parallel.data', 'parallel.fsdp', 'parallel.model')  # positive, or -1
_UNIT_INTERVAL = (  # values in [0, 1)
    'model.dropout_rate', 'model.attention_dropout_rate', 'model.relu_dropout_rate',
    'model.layerdrop_rate', 'model.drophead_rate', 'train.label_smoothing', 'train.adam_b1',
    'train.adam_b2',
)
_NON_NEGATIVE = ('train.lr_scale', 'train.adam_eps', 'decode.alpha', 'decode.max_extra_length')
_CHOICES = {
    'dtype': ('float32', 'bfloat16'),
    'model.position_encoding': ('sinusoid', 'learned'),
    'model.norm_position': ('post', 'pre'),
    'model.norm_type': ('layer_norm', 'scale_norm'),
    'model.qkv_init': ('separate', 'fused'),
    'data.dataset': ('wmt14_translate/de-en', 'wmt14_translate/fr-en', 'multi30k', 'builtin'),
    'data.spm_model_type': ('bpe', 'unigram'),
    'data.preprocessing': preprocessing.CHOICES,
}


def _get(config: ml_collections.ConfigDict, field: str):
  value = config
  for part in field.split('.'):
    if part not in value:
      raise ValueError(f'config.{field} is missing')
    value = value[part]
  return value


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first invalid field of `config`."""
  for field in _POSITIVE_INTS:
    value = _get(config, field)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
      raise ValueError(f'config.{field} must be a positive integer, got {value!r}')
  for field in _UNIT_INTERVAL:
    value = _get(config, field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
      raise ValueError(f'config.{field} must be in [0, 1), got {value!r}')
  for field, choices in _CHOICES.items():
    value = _get(config, field)
    if value not in choices:
      raise ValueError(f'config.{field} must be one of {choices}, got {value!r}')
  for field in _NON_NEGATIVE:
    value = _get(config, field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
      raise ValueError(f'config.{field} must be a non-negative number, got {value!r}')
  for field in _MESH_AXES:
    value = _get(config, field)
    if isinstance(value, bool) or not isinstance(value, int) or not (value > 0 or value == -1):
      raise ValueError(f'config.{field} must be a positive integer or -1, got {value!r}')
  if [_get(config, field) for field in _MESH_AXES].count(-1) > 1:
    raise ValueError('at most one of config.parallel.data/fsdp/model may be -1')
  num_eval_steps = _get(config, 'train.num_eval_steps')
  if not isinstance(num_eval_steps, int) or not (num_eval_steps > 0 or num_eval_steps == -1):
    raise ValueError(f'config.train.num_eval_steps must be a positive integer or -1 (the whole '
                     f'split), got {num_eval_steps!r}')
  longest = config.data.max_length + config.decode.max_extra_length
  if longest > config.model.max_len:
    raise ValueError(
        f'config.model.max_len={config.model.max_len} positions cannot hold the longest output, '
        f'config.data.max_length + config.decode.max_extra_length = {longest}')
  if 2 * config.decode.beam_size > config.data.vocab_size:
    raise ValueError(f'config.decode.beam_size={config.decode.beam_size} needs a vocabulary of '
                     f'at least {2 * config.decode.beam_size} tokens, config.data.vocab_size is '
                     f'{config.data.vocab_size}')
  if config.data.source_lang == config.data.target_lang:
    raise ValueError('config.data.source_lang and config.data.target_lang must differ, both are '
                     f'{config.data.source_lang!r}')


def model_config(config: ml_collections.ConfigDict) -> TransformerConfig:
  """The model's frozen config: `config.model`, the vocabulary size and the compute dtype."""
  validate(config)
  return TransformerConfig(
      vocab_size=config.data.vocab_size, dtype=jnp.dtype(config.dtype), **config.model.to_dict())


def _unknown_override(argv: list[str], config: ml_collections.ConfigDict) -> str | None:
  """The first `--config.<field>=...` argument whose field is not in `config`, if any."""
  for arg in argv[1:]:
    if not arg.startswith('--config.'):
      continue
    field = arg[len('--config.'):].split('=', 1)[0]
    node = config
    for part in field.split('.'):
      if not isinstance(node, ml_collections.ConfigDict) or part not in node:
        return f'{arg}: config.{field} does not exist'
      node = node[part]
  return None


def parse_flags(argv: list[str]) -> list[str]:
  """absl flags parser for the project's commands (`app.run(main, flags_parser=parse_flags)`).

  Parses the flags, then validates `--config` with its overrides, so that a misspelt field or
  an invalid value stops the command with a one-line error naming the field, before any work.
  """
  try:
    remaining = flags.FLAGS(argv)
    validate(flags.FLAGS.config)
  except flags.Error as e:  # a config file that raised keeps only its first and last lines
    lines = str(e).strip().splitlines()
    sys.exit(f'error: {lines[0]} {lines[-1]}' if len(lines) > 1 else f'error: {e}')
  except OSError as e:  # a missing config file
    sys.exit(f'error: {e}')
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    unknown = _unknown_override(argv, flags.FLAGS['config'].value)
    sys.exit(f'error: {unknown or e}')
  return remaining


def start_command(argv: list[str]) -> None:
  """What every command's `main` does first: rejects positional arguments and, unless
  --verbosity is given, logs warnings only (orbax logs every file operation at INFO)."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
