r"""How much of their training groups side by side spend at once: four one-row groups, one CPU
device each (`sweep --devices_per_group=1` on 4 devices).

  python experiments/side_by_side/overlap.py --output=experiments/side_by_side/overlap_cpu.json

The rows base, D1, D2 and D3 of experiments/table3_regularised/sweep.py (N=3, d_model 128,
packed sequences of 128 tokens), 80 steps each, four steps a call, each a group of its own, swept
in one process whose 4 CPU devices are 4 slots. A group's training span runs from its training
loop's start (its first step dispatched) to the fetch of its last steps' metrics, which waits
for them to finish on the device (`loop/train_metrics.py`). The file holds each group's span
(seconds from the sweep's start), the seconds during which at least two groups trained at once,
and for each group the share of its span that another group's overlapped. Run it in two
checkouts (PYTHONPATH=CHECKOUT) to compare them. Data: Multi30k from ../shared/data/multi30k
(the sweep file's default).
"""

import json
import os
import tempfile
import threading
import time

if __name__ == '__main__':  # 4 CPU devices, before jax is imported (tests import `overlapping`)
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                             + ' --xla_force_host_platform_device_count=4').strip()

from absl import flags  # pylint: disable=wrong-import-position

from transformer_jax import cli  # pylint: disable=wrong-import-position
from transformer_jax.config import loading  # pylint: disable=wrong-import-position
from transformer_jax.loop import train_metrics  # pylint: disable=wrong-import-position
from transformer_jax.storage import atomic, provenance  # pylint: disable=wrong-import-position
from transformer_jax.sweep import run as sweep_run  # pylint: disable=wrong-import-position

checkout = loading.import_sibling(__file__, '../tools/checkout')

ROWS = ['base', 'D1', 'D2', 'D3']
OVERRIDES = ['train.num_train_steps=80', 'train.steps_per_call=4', 'train.log_every_steps=4',
             'train.checkpoint_every_steps=80', 'train.eval_every_steps=80',
             'train.num_eval_steps=1', 'train.eval_bleu=False']


def _spans(sweep: str, workdir: str) -> list[list[float]]:
  """Each group's training span, [start, end] in seconds from the sweep's start."""
  spans, lock, origin = {}, threading.Lock(), time.monotonic()
  started, summaries = train_metrics.TrainMetrics.__init__, train_metrics.TrainMetrics.summaries

  def start(metrics, *args):
    started(metrics, *args)
    with lock:
      spans[id(metrics)] = [time.monotonic() - origin, None]

  def fetched(metrics, names):
    result = summaries(metrics, names)
    with lock:
      spans[id(metrics)][1] = time.monotonic() - origin
    return result

  train_metrics.TrainMetrics.__init__, train_metrics.TrainMetrics.summaries = start, fetched
  try:
    sweep_run.run(sweep, workdir, ROWS, os.path.join(workdir, 'rows'), OVERRIDES, 1, None, 1)
  finally:
    train_metrics.TrainMetrics.__init__, train_metrics.TrainMetrics.summaries = started, summaries
  return sorted(spans.values())


def overlapping(spans: list[list[float]]) -> float:
  """The seconds during which at least two of `spans` run at once."""
  events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
  running, since, total = 0, 0.0, 0.0
  for moment, change in events:
    if running >= 2:
      total += moment - since
    running, since = running + change, moment
  return total


def _shared(span: list[float], others: list[list[float]]) -> float:
  """The share of `span` that at least one of `others` overlaps."""
  pieces = sorted((max(span[0], a), min(span[1], b)) for a, b in others
                  if min(span[1], b) > max(span[0], a))
  covered, reached = 0.0, span[0]
  for a, b in pieces:
    covered += max(0.0, b - max(a, reached))
    reached = max(reached, b)
  return covered / (span[1] - span[0])


def main():
  sweep = os.path.join(checkout.ROOT, 'experiments', 'table3_regularised', 'sweep.py')
  with tempfile.TemporaryDirectory() as workdir:
    spans = _spans(sweep, workdir)
  result = {'rows': ROWS, 'overrides': OVERRIDES, 'spans': spans,
            'seconds_two_or_more_at_once': overlapping(spans),
            'seconds_first_start_to_last_end': max(b for _, b in spans) - min(a for a, _ in spans),
            'share_overlapped': [_shared(span, [o for o in spans if o is not span])
                                 for span in spans],
            'provenance': provenance.record()}
  atomic.write(_OUTPUT.value, json.dumps(result, indent=1) + '\n')
  print(json.dumps({k: v for k, v in result.items() if k != 'provenance'}, indent=1))


if __name__ == '__main__':
  _OUTPUT = flags.DEFINE_string('output', None, 'Where the figures go (JSON).', required=True)
  cli.run(main)
