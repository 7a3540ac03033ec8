"""Encoded splits kept in the workdir, so that text is read and encoded once per run.

  sides = token_store.saved(workdir, 'train', identity)    # (sources, targets) or None
  sides = token_store.write(workdir, 'train', pairs, encode, identity, dtype)

A split is encoded in chunks, streamed to disk (memory does not grow with the corpus), as
`workdir/tokens/{split}.source` and `.target` (every pair's token ids end to end, raw uint16
when the vocabulary fits, else int32), `{split}.lengths.npy` (each pair's source and target
length, EOS included) and `{split}.json`, written last: what the ids were encoded from (the
dataset's name, which changes with its content, the vocabulary's digest, the preprocessing,
the direction) and how. A resumed run or another process of the run finds them and opens the
ids memory-mapped, without preparing or reading the dataset; anything else (another
vocabulary, a changed file, ids that do not add up to the lengths) encodes again.

With several processes on one machine the operating system keeps one copy of the ids, in its
page cache, for all of them; no process parses text or holds a private copy, and each reads
the ids of its own sequences only (every process plans the same batches from the lengths, a
few bytes a pair, and assembles only its own block of sequences). In a bucket (`gs://`) the ids are
read into memory instead.
"""

import json
import os
from typing import Callable, Sequence

from absl import logging
from etils import epath
import numpy as np

from transformer_jax.data.batching import Sequences
from transformer_jax.storage import atomic, buckets

DIRECTORY = 'tokens'
FORMAT = 1
# Pairs encoded at a time: bounds the text and the SentencePiece output held in memory.
CHUNK = 50_000

SIDES = ('source', 'target')


def _paths(workdir: str, split: str) -> dict[str, str]:
  prefix = os.path.join(workdir, DIRECTORY, split)
  return {'source': f'{prefix}.source', 'target': f'{prefix}.target',
          'lengths': f'{prefix}.lengths.npy', 'meta': f'{prefix}.json'}


def _read_meta(path: str) -> dict | None:
  try:
    return json.loads(epath.Path(path).read_text(encoding='utf-8'))
  except (FileNotFoundError, ValueError):
    return None


def saved(workdir: str, split: str,
          identity: dict) -> tuple[Sequences, Sequences] | None:
  """The split's (sources, targets) saved in `workdir` for `identity` (JSON: what the ids are
  encoded from), or None if there are none, for other data, or damaged."""
  paths = _paths(workdir, split)
  meta = _read_meta(paths['meta'])
  if meta is None or {name: meta.get(name) for name in identity} != identity or meta.get(
      'format') != FORMAT:
    return None
  try:
    lengths = _load(paths['lengths'])
    sides = tuple(Sequences.from_lengths(_ids(paths[side], meta['dtype']),
                                         lengths[:, column].astype(np.int64))
                  for column, side in enumerate(SIDES))
  except (OSError, ValueError):
    return None
  if len(lengths) != meta['pairs'] or any(len(side.ids) != side.ends[-1] for side in sides):
    return None
  return sides


def target_lengths(workdir: str, split: str) -> np.ndarray | None:
  """The target length (EOS included) of every pair of the split saved in `workdir`, or None if
  it has none."""
  paths = _paths(workdir, split)
  if _read_meta(paths['meta']) is None:
    return None
  try:
    return _load(paths['lengths'])[:, 1]
  except (OSError, ValueError):
    return None


def _load(path: str) -> np.ndarray:
  with epath.Path(path).open('rb') as f:
    return np.load(f)


def _ids(path: str, dtype: str) -> np.ndarray:
  """The ids in `path`: memory-mapped (a plain array over the map: slicing a np.memmap makes a
  new memmap object each time); read whole from a bucket."""
  if buckets.is_url(path):
    return np.frombuffer(epath.Path(path).read_bytes(), dtype)
  return np.asarray(np.memmap(path, dtype=dtype, mode='r'))


def write(workdir: str, split: str, pairs: Sequence, encode: Callable, identity: dict,
          dtype: np.dtype) -> tuple[Sequences, Sequences]:
  """Encodes the split's `pairs` into `workdir` and returns them as `saved` does.

  `pairs[start:stop]` is a list of (source, target) texts; `encode(texts)` gives (ids end to
  end as `dtype`, lengths), as `tokenizer.encode_flat`.
  """
  paths = _paths(workdir, split)
  meta = {'format': FORMAT, 'pairs': len(pairs), 'dtype': np.dtype(dtype).name, **identity}
  _write(paths, pairs, encode, dtype, meta)
  sides = saved(workdir, split, identity)
  if sides is None:
    raise RuntimeError(f'{paths["meta"]}: the split just encoded does not read back')
  return sides


def _write(paths: dict[str, str], pairs: Sequence, encode: Callable, dtype: np.dtype,
           meta: dict) -> None:
  """Encodes `pairs` chunk by chunk into the split's files; the JSON goes last, so that a
  split interrupted while writing is encoded again."""
  meta_path = epath.Path(paths['meta'])
  meta_path.parent.mkdir(parents=True, exist_ok=True)
  if meta_path.exists():
    meta_path.unlink()
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
