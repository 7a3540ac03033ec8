r"""Inspects a config's data pipeline.

  python -m transformer_jax.data --config=configs/multi30k.py --inspect [--json]

Prints the vocabulary size, pairs per split (kept and dropped), the number of distinct batch
shapes, mean tokens per batch, the padding fraction (both sides, and the target side), and the
pipeline's throughput: real (non-padding) source + target tokens per second of assembling one
epoch of training batches.
The vocabulary is learned into --workdir (a temporary directory if not given).
"""

import json
import tempfile
import time

from absl import app, flags
from ml_collections import config_flags

from transformer_jax import cli
from transformer_jax.data import batching, pipeline
from transformer_jax.model_config import PAD_ID

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file.')
_INSPECT = flags.DEFINE_bool('inspect', False, 'Print statistics of the data pipeline.')
_JSON = flags.DEFINE_bool('json', False, 'Print one JSON object instead of text.')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Where the vocabulary is learned or found.')


def _real_tokens(batch: dict) -> int:
  return int((batch['inputs'] != PAD_ID).sum() + (batch['targets'] != PAD_ID).sum())


def inspect(data: pipeline.Data, seed: int) -> dict:
  """Statistics of the planned batches and the measured pipeline throughput."""
  train = data.batchers['train']
  plan = train.plan(seed)
  iterator = data.train_iterator(seed)
  start, tokens = time.perf_counter(), 0
  for _ in range(len(plan)):
    tokens += _real_tokens(next(iterator))
  seconds = time.perf_counter() - start
  return {
      'vocab_size': data.tokenizer.vocab_size(),
      'pairs': {split: {'kept': len(b.split), 'dropped': b.split.num_dropped}
                for split, b in data.batchers.items()},
      'train_batches_per_epoch': len(plan),
      'batch_shapes': len({(len(indices), length) for length, indices in plan}),
      'mean_tokens_per_batch': tokens / len(plan),
      'padding_fraction': batching.padding_fraction(train, plan),
      'target_padding_fraction': batching.padding_fraction(train, plan, ('targets',)),
      'pipeline_tokens_per_second': tokens / seconds,
  }


def main():
  if not _INSPECT.value:
    raise app.UsageError('nothing to do: pass --inspect')
  config = _CONFIG.value
  with tempfile.TemporaryDirectory() as scratch:
    stats = inspect(pipeline.load(config, _WORKDIR.value or scratch), config.seed)
  if _JSON.value:
    print(json.dumps(stats))
    return
  print(f"vocabulary          {stats['vocab_size']} tokens")
  for split, counts in stats['pairs'].items():
    print(f"{split:<20}{counts['kept']} pairs kept, {counts['dropped']} dropped (too long)")
  print(f"train batches       {stats['train_batches_per_epoch']} per epoch, "
        f"{stats['batch_shapes']} distinct shapes")
  print(f"tokens per batch    {stats['mean_tokens_per_batch']:.0f} real source + target tokens "
        f"on average, padding fraction {stats['padding_fraction']:.3f} "
        f"({stats['target_padding_fraction']:.3f} of the target side)")
  print(f"pipeline            {stats['pipeline_tokens_per_second']:,.0f} tokens/s")


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  cli.run(main)
