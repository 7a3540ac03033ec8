"""A synthetic split of WMT-like lengths, for the timing scripts that need WMT's size without
its text (`experiments/speed/batch_assembly.py`, `experiments/input_rate/input_rate.py`).

  synthetic = loading.import_sibling(__file__, '../tools/synthetic')
  split = synthetic.wmt_like_split(pairs=4_500_000, median=25.0, max_length=256)

Source lengths are log-normal with median `median` tokens, clipped to [1, max_length]; target
lengths the source's times a uniform factor in [0.8, 1.3]; ids random 16-bit ids, as the token
store keeps them for a vocabulary of 37000, each sentence's last EOS. Seeded: the same split
every time.
"""

import numpy as np

from transformer_jax.data import batching


def wmt_like_split(pairs: int, median: float, max_length: int,
                   seed: int = 0) -> batching.TokenizedSplit:
  rng = np.random.default_rng(seed)
  sources = np.clip(rng.lognormal(np.log(median), 0.6, pairs).astype(np.int64), 1, max_length)
  targets = np.clip((sources * rng.uniform(0.8, 1.3, pairs)).astype(np.int64), 1, max_length)
  sides = []
  for lengths in (sources, targets):
    ids = rng.integers(3, 37000, int(lengths.sum()), dtype=np.uint16)
    ids[np.cumsum(lengths) - 1] = 1  # EOS
    sides.append(batching.Sequences.from_lengths(ids, lengths))
  return batching.TokenizedSplit(*sides, 0)
