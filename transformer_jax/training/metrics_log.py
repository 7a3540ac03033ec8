"""Where training metrics go: `workdir/metrics.jsonl` (one JSON object per line) and
TensorBoard event files in `workdir/tensorboard/` (tensorboardX, no TensorFlow needed).

Only process 0 writes. A resumed run appends, so steps between the last checkpoint and a crash
appear twice; readers keep the last record of each (step, split). A line left partly written
by a crash (a full disk) is cut off before the resumed run appends. In a bucket (`gs://`), where
an object cannot be appended to, metrics.jsonl is uploaded whole at each write, and the event
file, written to a local temporary directory, too: a crash loses no record written before it.

Written here rather than with clu's metric writers: clu 0.0.12's TensorBoard writer
(`metric_writers.SummaryWriter`) imports TensorFlow and its other one PyTorch, and none of its
writers keeps a JSON record that a resumed run appends to and readers (`read`) deduplicate.
"""

import contextlib
import json
import os
import shutil
import sys
import tempfile
from typing import Iterator

from etils import epath
import jax

from transformer_jax.storage import buckets


def _tensorboardx():
  """tensorboardX, imported without PyTorch where this process has not imported it already:
  tensorboardX imports PyTorch when it is installed (the `hf` extra installs it) only to accept
  torch tensors, which this package never logs, and that import would slow every training
  command's start by seconds."""
  if 'torch' in sys.modules:
    import tensorboardX
    return tensorboardX
  sys.modules['torch'] = None  # `import torch` raises ImportError while tensorboardX loads
  try:
    import tensorboardX
  finally:
    del sys.modules['torch']
  return tensorboardX


class MetricsLog:

  def __init__(self, workdir: str):
    self._enabled = jax.process_index() == 0
    if self._enabled:
      path = os.path.join(workdir, 'metrics.jsonl')
      self._jsonl = buckets.Appended(path) if buckets.is_url(path) else _appending(path)
      tensorboard = os.path.join(workdir, 'tensorboard')
      # In a bucket: (the local directory the events are written to, the bucket's).
      self._events = ((tempfile.mkdtemp(prefix='tensorboard-'), tensorboard)
                      if buckets.is_url(tensorboard) else None)
      self._tensorboard = _tensorboardx().SummaryWriter(
          self._events[0] if self._events else tensorboard)

  def write(self, step: int, split: str, metrics: dict[str, float | str]) -> None:
    """Records `metrics` of `split` ('train', 'validation', 'compile', 'data') at `step`;
    TensorBoard gets the numbers."""
    if not self._enabled:
      return
    with self._jsonl_errors():
      self._jsonl.write(json.dumps({'step': step, 'split': split, **metrics}) + '\n')
      self._jsonl.flush()
    for name, value in metrics.items():
      if not isinstance(value, str):
        self._tensorboard.add_scalar(f'{split}/{name}', value, step)
    self._tensorboard.flush()
    self._upload_events()

  def _upload_events(self) -> None:
    if self._events:
      local, url = self._events
      for name in os.listdir(local):
        buckets.upload(os.path.join(local, name), os.path.join(url, name))

  def close(self) -> None:
    if self._enabled:
      try:
        with self._jsonl_errors():
          self._jsonl.close()  # flushes what a failed write left buffered
      finally:
        self._tensorboard.close()
        if self._events:
          self._upload_events()
          shutil.rmtree(self._events[0])

  @contextlib.contextmanager
  def _jsonl_errors(self) -> Iterator[None]:
    """An OSError writing metrics.jsonl (a full disk) raised again naming the file."""
    try:
      yield
    except OSError as e:
      raise OSError(f'cannot write {self._jsonl.name}: {e.strerror or e}') from e


def _appending(path: str):
  """`path` opened to append to, cut after its last newline first if it has bytes after it."""
  if os.path.exists(path):
    with open(path, 'rb+') as f:
      data = f.read()
      end = data.rfind(b'\n') + 1
      if end < len(data):
        f.truncate(end)
  return open(path, 'a')


def read(path: str) -> list[dict]:
  """The records of a metrics.jsonl, keeping the last record of each (step, split)."""
  records = {}
  with epath.Path(path).open() as f:
    for number, line in enumerate(f, start=1):
      try:
        record = json.loads(line)
        records[record['step'], record['split']] = record
      except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f'{path}:{number}: not a metrics record ({e})') from e
  return sorted(records.values(), key=lambda r: (r['step'], r['split']))
