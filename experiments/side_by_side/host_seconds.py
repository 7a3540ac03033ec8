r"""The host's seconds a dispatched call per group with 1, 2, 4 and 8 groups side by side: the
Python that feeds the devices, outside their compute, measured on 8 CPU devices.

  python experiments/side_by_side/host_seconds.py \
      --output=experiments/side_by_side/host_seconds_cpu.json

For each `train.steps_per_call` K (1 and 4) and each count G of groups: G groups of one row each,
the regularised Table 3 sweep's base row (`experiments/table3_regularised/sweep.py`: N=3, d_model
128, packed sequences of 128 tokens), train side by side for 200 steps, each on a CPU device of its
own in a thread of its own, as the sweep's slots do (`runs_together.train_together` with its
`devices`, `sweep/slots.py`). The batches are cut to 2 packed sequences (256 tokens): the host's
work a call does not depend on the batch's size, the CPU's compute does, and this CPU computes the
devices' steps too. Measured per call, in CPU seconds of the thread that does it
(`time.thread_time`: the compute, which XLA runs on threads of its own, and the waits are left out):
  loop   the training loop's thread, from taking one call's batches to taking the next's:
         dispatching the call, its metrics, logging;
  feed   the feed's thread while it makes one call's batches (`training/feed.py`: assembling,
         stacking and placing them on the device).
The first 20 calls of each group (compiling, warming up) and its last (the dev evaluation and
the checkpoint at the end) are left out; each figure is the median over the groups' calls.
Every Python thread of a process takes turns under one lock (the GIL), so one process makes at
most 1 / (loop + feed) calls a second in all, whatever the number of groups: the page
(README.md here) divides an accelerator's step by that to say how many devices one process keeps
busy. Data: Multi30k from ../shared/data/multi30k (the sweep file's default).
"""

import concurrent.futures
import json
import os
import statistics
import sys
import tempfile
import threading
import time

# 8 CPU devices, before jax is imported.
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                           + ' --xla_force_host_platform_device_count=8').strip()

from absl import flags  # pylint: disable=wrong-import-position
import jax  # pylint: disable=wrong-import-position

from transformer_jax import cli  # pylint: disable=wrong-import-position
from transformer_jax.config import checks, loading  # pylint: disable=wrong-import-position
from transformer_jax.loop import runs_together  # pylint: disable=wrong-import-position
from transformer_jax.storage import atomic, provenance  # pylint: disable=wrong-import-position
from transformer_jax.training import feed  # pylint: disable=wrong-import-position

checkout = loading.import_sibling(__file__, '../tools/checkout')

_OUTPUT = flags.DEFINE_string('output', None, 'Where the figures go (JSON).', required=True)

GROUPS = (1, 2, 4, 8)
KS = (1, 4)
STEPS = 200
WARM_CALLS = 20


class _Spied:
  """Each thread's CPU seconds at every call it takes (the loop) and each call's CPU seconds
  to make (the feed), recorded by wrapping `feed.Feed.__next__` and `feed._Calls.__next__`."""

  def __init__(self):
    self.taken: dict[int, list[float]] = {}  # loop thread -> thread_time at each call taken
    self.made: dict[int, list[float]] = {}  # feed thread -> each call's thread seconds
    self._lock = threading.Lock()
    self._originals = feed.Feed.__next__, feed._Calls.__next__  # pylint: disable=protected-access

  def __enter__(self):
    take, make = self._originals

    def taken(feed_self):
      call = take(feed_self)
      with self._lock:
        self.taken.setdefault(threading.get_ident(), []).append(time.thread_time())
      return call

    def made(calls_self):
      start = time.thread_time()
      call = make(calls_self)
      with self._lock:
        self.made.setdefault(threading.get_ident(), []).append(time.thread_time() - start)
      return call

    feed.Feed.__next__, feed._Calls.__next__ = taken, made  # pylint: disable=protected-access
    return self

  def __exit__(self, *exc_info):
    feed.Feed.__next__, feed._Calls.__next__ = self._originals  # pylint: disable=protected-access


def _config(k: int):
  config = loading.from_file(os.path.join(checkout.ROOT, 'experiments', 'table3_regularised',
                                          'sweep.py:base'))
  config.update_from_flattened_dict({
      'data.tokens_per_batch': 2 * config.data.pack_length, 'train.steps_per_call': k,
      'train.num_train_steps': STEPS, 'train.log_every_steps': 100,
      'train.eval_every_steps': STEPS, 'train.checkpoint_every_steps': STEPS,
      'train.num_eval_steps': 1, 'train.eval_bleu': False})
  checks.validate(config)
  return config


def _measure(groups: int, k: int, root: str, data_cache: dict) -> dict:
  """G groups side by side, K steps a call: the median loop and feed seconds a call."""
  config, devices = _config(k), jax.local_devices()
  start = time.perf_counter()
  with _Spied() as spied, concurrent.futures.ThreadPoolExecutor(groups) as threads:
    runs = [threads.submit(runs_together.train_together, [config],
                           [os.path.join(root, f'g{groups}_k{k}_{i}')], data_cache, None,
                           [devices[i]]) for i in range(groups)]
    for run in runs:
      run.result()
  wall = time.perf_counter() - start
  loop = [later - earlier for times in spied.taken.values()
          for earlier, later in zip(times[WARM_CALLS:-2], times[WARM_CALLS + 1:-1])]
  made = [seconds for calls in spied.made.values() for seconds in calls[WARM_CALLS:-1]]
  return {'groups': groups, 'steps_per_call': k, 'calls_measured': len(loop),
          'loop_seconds_per_call': statistics.median(loop),
          'feed_seconds_per_call': statistics.median(made),
          'host_seconds_per_call': statistics.median(loop) + statistics.median(made),
          'wall_seconds': wall}


def _vector_extensions() -> list[str]:
  """The CPU's AVX extensions (Linux's /proc/cpuinfo flags), which set how fast XLA's CPU code
  runs."""
  try:
    with open('/proc/cpuinfo') as f:
      flags_line = next(line for line in f if line.startswith('flags'))
  except (OSError, StopIteration):
    return []
  return sorted(flag for flag in flags_line.split(':', 1)[1].split()
                if flag in ('avx', 'avx2', 'avx512f', 'avx512bw', 'avx512_bf16', 'amx_tile'))


def main():
  results = []
  data_cache = {}  # the data and vocabulary, loaded once (`runs_together.data_key`)
  with tempfile.TemporaryDirectory(prefix='host_seconds_') as root:
    for k in KS:
      for groups in GROUPS:
        results.append(_measure(groups, k, root, data_cache))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        atomic.write(_OUTPUT.value, json.dumps(
            {'provenance': provenance.record(jax.devices()[0].device_kind),
             'vector_extensions': _vector_extensions(),
             'xla_flags': os.environ['XLA_FLAGS'], 'steps': STEPS, 'warm_calls': WARM_CALLS,
             'results': results}, indent=2) + '\n')


if __name__ == '__main__':
  cli.run(main)
