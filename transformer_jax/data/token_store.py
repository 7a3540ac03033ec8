"""Encoded splits kept in the workdir, so that text is read and encoded once per run.

  sources, targets = token_store.encoded(workdir, 'train', examples, encode, identity)

A split is encoded in chunks, streamed to disk (memory does not grow with the corpus), as
`workdir/tokens/{split}.source` and `.target` (every pair's token ids end to end, raw uint16
when the vocabulary fits, else int32), `{split}.lengths.npy` (each pair's source and target
length, EOS included) and `{split}.json`, written last: what the files were encoded from (the
dataset, the vocabulary's digest, the preprocessing, the direction) and how. A resumed run or
another process of the run finds them and opens the ids memory-mapped, without reading any
text; anything else (another vocabulary, a changed file) encodes again.

Memory-mapped ids are what lets each of several processes read only what it needs: every
process plans the same batches from the lengths (a few bytes a pair) and assembles only its
own block of rows, so the operating system reads only the pages of those rows' ids.
"""

import json
import os
from typing import Callable, Sequence

from absl import logging
import numpy as np

from transformer_jax import atomic
from transformer_jax.data.batching import Sequences

DIRECTORY = 'tokens'
FORMAT = 1
# Pairs encoded at a time: bounds the text and the SentencePiece output held in memory.
CHUNK = 50_000

SIDES = ('source', 'target')


def _paths(workdir: str, split: str) -> dict[str, str]:
  prefix = os.path.join(workdir, DIRECTORY, split)
  return {'source': f'{prefix}.source', 'target': f'{prefix}.target',
          'lengths': f'{prefix}.lengths.npy', 'meta': f'{prefix}.json'}


def _saved(path: str) -> dict | None:
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (FileNotFoundError, ValueError):
    return None


def encoded(workdir: str, split: str, pairs: Sequence, encode: Callable,
            identity: dict, dtype: np.dtype) -> tuple[tuple[Sequences, Sequences], bool]:
  """((sources, targets), whether they were encoded now) of the split's `pairs`.

  `pairs[start:stop]` is a list of (source, target) texts; `encode(texts)` gives
  (ids end to end as `dtype`, lengths), as `tokenizer.encode_flat`. `identity` (JSON) names
  what the ids are encoded from: saved ids are reused only for the same identity and count.
  """
  paths = _paths(workdir, split)
  meta = {'format': FORMAT, 'pairs': len(pairs), 'dtype': np.dtype(dtype).name, **identity}
  fresh = _saved(paths['meta']) != meta
  if fresh:
    _write(paths, pairs, encode, dtype, meta)
  lengths = np.load(paths['lengths'])
  # A plain array over the map: slicing a np.memmap makes a memmap each time, twice as slow.
  sides = tuple(Sequences.from_lengths(
      np.asarray(np.memmap(paths[side], dtype=meta['dtype'], mode='r')),
      lengths[:, column].astype(np.int64)) for column, side in enumerate(SIDES))
  return sides, fresh


def _write(paths: dict[str, str], pairs: Sequence, encode: Callable, dtype: np.dtype,
           meta: dict) -> None:
  """Encodes `pairs` chunk by chunk into the split's files; the JSON goes last, so that a
  split interrupted while writing is encoded again."""
  os.makedirs(os.path.dirname(paths['meta']), exist_ok=True)
  if os.path.exists(paths['meta']):
    os.remove(paths['meta'])
  lengths = []
  with atomic.replacing(paths['source']) as source_path, \
      atomic.replacing(paths['target']) as target_path, \
      open(source_path, 'wb') as source_file, open(target_path, 'wb') as target_file:
    for start in range(0, len(pairs), CHUNK):
      chunk = pairs[start:start + CHUNK]
      chunk_lengths = []
      for texts, file in (([s for s, _ in chunk], source_file), ([t for _, t in chunk],
                                                                  target_file)):
        ids, side_lengths = encode(texts)
        file.write(np.asarray(ids, dtype).tobytes())
        chunk_lengths.append(side_lengths)
      lengths.append(np.stack(chunk_lengths, 1).astype(np.int32))
      logging.log_every_n_seconds(logging.INFO, 'encoding: %d of %d pairs', 30,
                                  start + len(chunk), len(pairs))
  with atomic.replacing(paths['lengths']) as temporary, open(temporary, 'wb') as f:
    np.save(f, np.concatenate(lengths))
  atomic.write(paths['meta'], json.dumps(meta, indent=1))
