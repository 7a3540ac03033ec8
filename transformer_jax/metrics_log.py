"""Where training metrics go: `workdir/metrics.jsonl` (one JSON object per line) and
TensorBoard event files in `workdir/tensorboard/` (tensorboardX, no TensorFlow needed).

Only process 0 writes. A resumed run appends, so steps between the last checkpoint and a crash
appear twice; readers keep the last record of each (step, split).
"""

import json
import os

import jax
import tensorboardX


class MetricsLog:

  def __init__(self, workdir: str):
    self._enabled = jax.process_index() == 0
    if self._enabled:
      self._jsonl = open(os.path.join(workdir, 'metrics.jsonl'), 'a')
      self._tensorboard = tensorboardX.SummaryWriter(os.path.join(workdir, 'tensorboard'))

  def write(self, step: int, split: str, metrics: dict[str, float]) -> None:
    """Records `metrics` of `split` ('train', 'validation', ...) at `step`."""
    if not self._enabled:
      return
    try:
      self._jsonl.write(json.dumps({'step': step, 'split': split, **metrics}) + '\n')
      self._jsonl.flush()
    except OSError as e:
      raise OSError(f'cannot write {self._jsonl.name}: {e.strerror or e}') from e
    for name, value in metrics.items():
      self._tensorboard.add_scalar(f'{split}/{name}', value, step)
    self._tensorboard.flush()

  def close(self) -> None:
    if self._enabled:
      self._jsonl.close()
      self._tensorboard.close()


def read(path: str) -> list[dict]:
  """The records of a metrics.jsonl, keeping the last record of each (step, split)."""
  records = {}
  with open(path) as f:
    for line in f:
      record = json.loads(line)
      records[record['step'], record['split']] = record
  return sorted(records.values(), key=lambda r: (r['step'], r['split']))
