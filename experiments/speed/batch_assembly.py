r"""How long assembling one epoch's packed training batches (`Batcher.assemble`) takes, against
another checkout of the code, interleaved.

  python experiments/speed/batch_assembly.py [--pairs=4500000] [--pack_length=256] \
      [--tokens_per_batch=25000] [--median=25] [--before=DIR] [--rounds=3] [--output=FILE]

The pairs are `experiments/tools/synthetic.py`'s WMT-like split (lengths as in `packing_plan.py`, median
`--median` tokens, random 16-bit ids). WMT 2014 EN-DE has about 4.5M training pairs (§5.1); Multi30k-like:
`--pairs=29000 --pack_length=128 --tokens_per_batch=4096` with a shorter `--median`. One epoch
is planned (`Batcher.plan`, packed, seed 0: not timed), then each round assembles all of its
batches whole (one process). With `--before` (a checkout of the repository, such as
`git worktree add /tmp/before HEAD`), that checkout's `transformer_jax/data/batching.py` is
loaded from its file under another module name and assembles the same batches from the same
split, in the order A B B A over the rounds (this checkout first in even rounds), after a check
that both give the same arrays for the first batches. Prints, and writes to `--json`, the
seconds of each round, their medians, the speed-up (before / this) and the machine.
"""

import importlib.util
import os
import sys
import time

from absl import app, flags
import numpy as np

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.data import batching

measure = loading.import_sibling(__file__, '../tools/measure')
synthetic = loading.import_sibling(__file__, '../tools/synthetic')

_PAIRS = flags.DEFINE_integer('pairs', 4_500_000, 'Training pairs.')
_PACK_LENGTH = flags.DEFINE_integer('pack_length', 256, 'Sequence length '
                                    '(config.data.pack_length); also the longest pair '
                                    '(config.data.max_length).')
_TOKENS_PER_BATCH = flags.DEFINE_integer('tokens_per_batch', 25000,
                                         'config.data.tokens_per_batch.')
_MEDIAN = flags.DEFINE_float('median', 25.0, 'Median source length, in tokens.')
_BEFORE = flags.DEFINE_string('before', None, 'A checkout of the code to compare with.')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Rounds, each assembling the epoch once per code.')
cli.renamed('repeats', 'rounds', 'how many times each variant is timed')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')

_CHECKED_BATCHES = 3  # compared between the two codes before timing


def _load_before(checkout: str):
  """The `batching` module of another checkout, under its own name (it imports the rest of
  `transformer_jax` from this one: PAD_ID)."""
  path = os.path.join(checkout, 'transformer_jax', 'data', 'batching.py')
  spec = importlib.util.spec_from_file_location('batching_before', path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up
  spec.loader.exec_module(module)
  return module


def _assemble_epoch(batcher, plan) -> float:
  """Seconds to assemble every batch of `plan`."""
  start = time.perf_counter()
  for length, indices in plan:
    batcher.assemble(length, indices)
  return time.perf_counter() - start


def _check_same(batchers: dict, plan) -> None:
  for length, indices in plan[:_CHECKED_BATCHES]:
    this, before = (b.assemble(length, indices) for b in batchers.values())
    if list(this) != list(before) or not all(np.array_equal(this[k], before[k]) for k in this):
      raise AssertionError(f'the two codes assemble another batch of {indices.shape} sequences')


def main(argv):
  del argv
  length = _PACK_LENGTH.value
  split = synthetic.wmt_like_split(_PAIRS.value, _MEDIAN.value, length)
  settings = dict(max_length=length, tokens_per_batch=_TOKENS_PER_BATCH.value,
                  pack_length=length)
  batchers = {'this': batching.Batcher(split, **settings)}
  if _BEFORE.value:
    # The same split object: the older Batcher reads it through the same attributes.
    batchers['before'] = _load_before(_BEFORE.value).Batcher(split, **settings)
  plan = batchers['this'].plan(seed=0)
  if 'before' in batchers:
    _check_same(batchers, plan)
  rounds = measure.interleaved(list(batchers), _ROUNDS.value,
                               lambda name: _assemble_epoch(batchers[name], plan))
  seconds = {name: [r[name] for r in rounds] for name in batchers}
  medians = measure.medians(rounds)
  result = {
      'pairs': _PAIRS.value, 'pack_length': length, 'tokens_per_batch': _TOKENS_PER_BATCH.value,
      'median_source_length': _MEDIAN.value, 'batches': len(plan),
      'rows': sum(len(indices) for _, indices in plan), 'seconds': seconds,
      'median_seconds': medians}
  if 'before' in medians:
    result['speedup'] = medians['before'] / medians['this']
  print(f'{_PAIRS.value} pairs, {len(plan)} packed batches of {length}-token sequences: '
        + ', '.join(f'{name} {median:.3f} s' for name, median in medians.items())
        + (f', speed-up {result["speedup"]:.2f}x' if 'speedup' in result else ''))
  measure.write(result, _OUTPUT.value)


if __name__ == '__main__':
  app.run(main)
