r"""How long packing takes to plan an epoch (`batching.first_fit_decreasing`) at WMT's size.

  python experiments/speed/packing_plan.py [--pairs=4500000] [--pack_length=256] [--rounds=1] \
      [--output=FILE]

WMT 2014 EN-DE has about 4.5M training pairs (§5.1). Their lengths are drawn here, seeded: source
lengths log-normal with median 25 tokens, clipped to [1, pack_length], and target lengths the
source's times a uniform factor in [0.8, 1.3]. The planning cost does not depend on the lengths
beyond their range: each pair costs O(pack_length). Prints the pairs, the sequences they pack into,
the target-side padding fraction of those sequences and the seconds per plan (the best of --rounds).
"""

import time

from absl import app, flags
import numpy as np

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.data import batching

measure = loading.import_sibling(__file__, '../tools/measure')

_PAIRS = flags.DEFINE_integer('pairs', 4_500_000, 'Training pairs.')
_PACK_LENGTH = flags.DEFINE_integer('pack_length', 256,
                                    'Sequence length (config.data.pack_length).')
_ROUNDS = flags.DEFINE_integer('rounds', 1, 'Plans timed; the best is reported.')
cli.renamed('repeats', 'rounds', 'how many times each variant is timed')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  length = _PACK_LENGTH.value
  sources = np.clip(rng.lognormal(np.log(25), 0.6, _PAIRS.value).astype(np.int64), 1, length)
  targets = np.clip((sources * rng.uniform(0.8, 1.3, _PAIRS.value)).astype(np.int64), 1, length)
  order = rng.permutation(_PAIRS.value)
  best = np.inf
  for _ in range(_ROUNDS.value):
    start = time.perf_counter()
    packed = batching.first_fit_decreasing(order, sources, targets, length)
    best = min(best, time.perf_counter() - start)
  padding = 1 - targets.sum() / (len(packed) * length)
  print(f'{_PAIRS.value} pairs -> {len(packed)} sequences of {length} tokens, target padding '
        f'{padding:.4f}; planned in {best:.1f} s')
  # 'rows': the packed sequences, as the earlier records name them.
  measure.write({'pairs': _PAIRS.value, 'pack_length': length, 'rows': len(packed),
                 'target_padding': float(padding), 'rounds': _ROUNDS.value,
                 'seconds': best}, _OUTPUT.value)


if __name__ == '__main__':
  app.run(main)
