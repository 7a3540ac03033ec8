r"""`python -m transformer_jax.data`: prepares a config's data once for runs on many hosts, or
inspects its data pipeline (sizes, padding, speed).

  python -m transformer_jax.data --config=configs/base.py --prepare --output=gs://bucket/wmt14
  python -m transformer_jax.data --config=configs/multi30k.py --inspect [--json] [--batches=N]

--prepare prepares the dataset (where config.data.tfds_data_dir says), learns the vocabulary and
encodes every split into --output, a directory or a bucket's path (default:
config.data.prepared), with a record of the data fields they were prepared for (`prepared`);
runs given `--config.data.prepared=OUTPUT` read them from there on every process. Run again on
an unfinished --output, it goes on where it stopped.

--inspect prints the vocabulary size, pairs per split (kept and dropped), the number of
distinct batch shapes, mean tokens per batch, the padding fraction (both sides, and the target
side), the pipeline's throughput: real (non-padding) source + target tokens per second of
assembling one epoch of training batches (or its first --batches), how long loading took
(preparing the dataset, the vocabulary, encoding or opening the encoded splits), the latency of
a resumed iterator's first batch (restored halfway through its first epoch), and the process's
peak resident memory.
The vocabulary and the encoded splits go into --workdir (a temporary directory if not given):
a second inspection of the same --workdir measures what a resumed run loads.
"""

import json
import resource
import tempfile
import time

from absl import app, flags
from ml_collections import config_flags

from transformer_jax import cli
from transformer_jax.config import fields
from transformer_jax.data import batching, pipeline
from transformer_jax.data.tokenizer import PAD_ID

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file.')
_PREPARE = flags.DEFINE_bool('prepare', False, 'Prepare the vocabulary and the encoded splits '
                              'into --output, for runs given config.data.prepared=OUTPUT.')
_OUTPUT = flags.DEFINE_string('output', None, 'Where --prepare writes (a directory or '
                              'gs://bucket/path; default: config.data.prepared).')
_INSPECT = flags.DEFINE_bool('inspect', False, 'Print statistics of the data pipeline.')
_JSON = flags.DEFINE_bool('json', False, 'Print one JSON object instead of text.')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Where the vocabulary and the encoded splits '
                                'are written or found.')
_BATCHES = flags.DEFINE_integer('batches', None, 'Measure the throughput on the first this many '
                                'batches of the epoch (default: all of them).')


def _real_tokens(batch: dict) -> int:
  return int((batch['inputs'] != PAD_ID).sum() + (batch['targets'] != PAD_ID).sum())


def _first_batch_seconds(data: pipeline.Data, seed: int, batches: int) -> float:
  """Seconds from making a training iterator restored halfway through its first epoch to its
  first batch, as a resumed run does."""
  start = time.perf_counter()
  iterator = data.train_iterator(seed)
  iterator.set_state({'epoch': 0, 'index': batches // 2, 'batches': batches,
                      'batching': iterator.batching()})
  next(iterator)
  return time.perf_counter() - start


def inspect(data: pipeline.Data, seed: int, batches: int | None = None) -> dict:
  """Statistics of the planned batches and the measured pipeline throughput (over the first
  `batches` batches, or the whole epoch, from the epoch's plan in hand: the next epoch's is made
  in the background meanwhile, as in training)."""
  train = data.batchers['train']
  start = time.perf_counter()
  plan = train.plan(seed)
  plan_seconds = time.perf_counter() - start
  first_batch_seconds = _first_batch_seconds(data, seed, len(plan))
  iterator = data.train_iterator(seed)
  iterator.get_state()  # waits for the epoch's plan, made in the background
  measured = len(plan) if batches is None else min(batches, len(plan))
  start, tokens = time.perf_counter(), 0
  for _ in range(measured):
    tokens += _real_tokens(next(iterator))
  seconds = time.perf_counter() - start
  return {
      'vocab_size': data.tokenizer.vocab_size(),
      'pairs': {split: {'kept': len(b.split), 'dropped': b.split.num_dropped}
                for split, b in data.batchers.items()},
      'train_batches_per_epoch': len(plan),
      'batch_shapes': len({(len(indices), length) for length, indices in plan}),
      'mean_tokens_per_batch': tokens / measured,
      'padding_fraction': batching.padding_fraction(train, plan),
      'target_padding_fraction': batching.padding_fraction(train, plan, ('targets',)),
      'pipeline_tokens_per_second': tokens / seconds,
      'batches_measured': measured,
      'plan_seconds': plan_seconds,
      'load_seconds': data.seconds,
      'first_batch_seconds': first_batch_seconds,
      # Linux reports kilobytes.
      'peak_memory_bytes': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
  }


def prepare(config, output: str | None) -> None:
  """Prepares `config`'s data into `output` (`pipeline.prepare`) and prints what it holds."""
  output = output or config.data.prepared
  if not output:
    raise app.UsageError('--prepare needs --output (or config.data.prepared): where to write')
  data = pipeline.prepare(config, output)
  pairs = ', '.join(f'{split} {len(b.split) + b.split.num_dropped}'
                    for split, b in data.batchers.items())
  print(f'prepared into {output}: a {data.tokenizer.vocab_size()}-token vocabulary, pairs '
        f'{pairs} ({pipeline.loading(data.seconds)})')
  print(f'train with --config.data.prepared={output}')


def main():
  if _PREPARE.value == _INSPECT.value:
    raise app.UsageError('pass one of --prepare and --inspect')
  config = _CONFIG.value
  if _PREPARE.value:
    prepare(config, _OUTPUT.value)
    return
  with tempfile.TemporaryDirectory() as scratch:
    stats = inspect(pipeline.load(config, _WORKDIR.value or scratch),
                    fields.shuffle_seed(config), _BATCHES.value)
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
  print(f"pipeline            {stats['pipeline_tokens_per_second']:,.0f} tokens/s "
        f"({stats['batches_measured']} batches), an epoch planned in "
        f"{stats['plan_seconds']:.2f} s")
  print(f"loading             {pipeline.loading(stats['load_seconds'])}")
  print(f"resumed iterator    first batch in {stats['first_batch_seconds']:.2f} s")
  print(f"peak memory         {stats['peak_memory_bytes'] / 2**30:.2f} GiB")


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  cli.run(main)
