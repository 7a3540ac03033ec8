r"""How fast one host makes training batches, and how long it takes to hand the devices a call.

  taskset -c 0 python experiments/input_rate/input_rate.py [--pairs=4500000] [--epochs=3] \
      [--process_count=1 --process_index=0] [--ks=1,4,16] [--rounds=10] --output=FILE

Run under `taskset -c 0`: one core assembles, plans and dispatches, taking turns; the file
records the cores the process had (`cores`). The results: the table of README.md here.

The batches. --pairs pairs of `experiments/tools/synthetic.py`'s WMT-like split (source lengths
log-normal with median --median tokens, target lengths the source's times a uniform factor in [0.8,
1.3], both clipped to [1, --pack_length]; random 16-bit ids), batched as base trains on WMT (§5.1's
25000 source and 25000 target tokens, packed into sequences of --pack_length tokens; a batch's
sequences a multiple of --process_count). A real `batching.TrainIterator` (seed 0) yields this
host's block of each batch's sequences (--process_index of --process_count,
`batching.process_sequences`). The script waits for the first plan (`first_plan_seconds`: epoch 0's
packing and plan, once a run), then takes every batch of epochs 0 to --epochs, timing each `next()`,
while the iterator plans each next epoch in its background thread, as in training. It writes the
batches a second over all of them (`batches_per_second`, boundaries included), the longest `next()`,
the one at each epoch boundary, and the planner thread's seconds for epoch 0's packing and for each
plan: wall, and the thread's CPU time (on one core the wall time also holds the batches assembled
meanwhile).

The dispatch. For each K of --ks, `configs/tiny.py`'s train step on packed batches of its shape,
K steps a call (`Trainer.train_step` for K = 1, else `Trainer.train_steps` on K stacked
batches: `benchmark.prepared_step`), compiled and warmed up, then called --rounds times, each
on idle devices: `host_seconds_per_call` is the median wall time until a call returns (JAX
dispatches asynchronously: the host's time a call), `call_seconds` the median until its results
are ready (the devices' compute too).
"""

import dataclasses
import os
import statistics
import threading
import time

from absl import app, flags
import jax

from transformer_jax import benchmark
from transformer_jax.config import checks, loading
from transformer_jax.data import batching

checkout = loading.import_sibling(__file__, '../tools/checkout')
measure = loading.import_sibling(__file__, '../tools/measure')
synthetic = loading.import_sibling(__file__, '../tools/synthetic')

_PAIRS = flags.DEFINE_integer('pairs', 4_500_000, 'Training pairs.')
_MEDIAN = flags.DEFINE_float('median', 25.0, 'Median source length, in tokens.')
_PACK_LENGTH = flags.DEFINE_integer('pack_length', 256, 'Sequence length '
                                    '(config.data.pack_length); also the longest pair '
                                    '(config.data.max_length).')
_TOKENS_PER_BATCH = flags.DEFINE_integer('tokens_per_batch', 25000,
                                         'config.data.tokens_per_batch.')
_EPOCHS = flags.DEFINE_integer('epochs', 3, 'Epoch boundaries crossed while timing.')
_PROCESS_COUNT = flags.DEFINE_integer('process_count', 1, 'The hosts that share each batch.')
_PROCESS_INDEX = flags.DEFINE_integer('process_index', 0, 'The host measured.')
_KS = flags.DEFINE_list('ks', ['1', '4', '16'], 'Steps a call (train.steps_per_call) whose '
                        'dispatch is timed; empty: none.')
_ROUNDS = flags.DEFINE_integer('rounds', 10, 'Calls timed for each K.')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')


@dataclasses.dataclass(frozen=True)
class _TimedBatcher(batching.Batcher):
  """A `batching.Batcher` that records the seconds of epoch 0's packing ('packing') and of
  each epoch's plan (by its number), as the thread that makes them sees them."""

  seconds: dict = dataclasses.field(default_factory=dict)

  def packed_sequences(self, seed, cancel=None):
    return self._timed('packing', super().packed_sequences, seed, cancel)

  def plan(self, seed, epoch=0, cancel=None, packed=None):
    return self._timed(str(epoch), super().plan, seed, epoch, cancel, packed)

  def _timed(self, name: str, make, *args):
    wall, cpu = time.perf_counter(), time.thread_time()
    made = make(*args)
    self.seconds[name] = {'wall': time.perf_counter() - wall, 'cpu': time.thread_time() - cpu,
                          'thread': threading.current_thread().name}
    return made


def _input_rate() -> dict:
  length = _PACK_LENGTH.value
  split = synthetic.wmt_like_split(_PAIRS.value, _MEDIAN.value, length)
  batcher = _TimedBatcher(split, max_length=length,
                          tokens_per_batch=_TOKENS_PER_BATCH.value,
                          sequences_multiple=_PROCESS_COUNT.value, pack_length=length)
  start = time.perf_counter()
  with batching.TrainIterator(batcher, seed=0, process_index=_PROCESS_INDEX.value,
                              process_count=_PROCESS_COUNT.value) as iterator:
    per_epoch = iterator.get_state()['batches']  # waits for epoch 0's plan
    first_plan = time.perf_counter() - start
    waits, sequences = [], set()
    start = time.perf_counter()
    for _ in range((_EPOCHS.value + 1) * per_epoch):
      taken = time.perf_counter()
      batch = next(iterator)
      waits.append(time.perf_counter() - taken)
      sequences.add(len(batch['inputs']))
    seconds = time.perf_counter() - start
    state = iterator.get_state()
    assert (state['epoch'], state['index']) == (_EPOCHS.value, per_epoch)  # every batch taken
  return {
      'pairs': len(batcher.split), 'pack_length': length,
      # Keys as in the earlier records, which experiments/tables.py reads ('rows': sequences).
      'tokens_per_batch': batcher.tokens_per_batch, 'rows_multiple': batcher.sequences_multiple,
      'process_index': _PROCESS_INDEX.value, 'process_count': _PROCESS_COUNT.value,
      'cores': len(os.sched_getaffinity(0)), 'batches_per_epoch': per_epoch,
      'rows_per_batch': sorted(sequences), 'first_plan_seconds': first_plan,
      'planning_seconds': dict(batcher.seconds), 'batches_timed': len(waits),
      'epochs_crossed': _EPOCHS.value, 'batches_per_second': len(waits) / seconds,
      'longest_wait_seconds': max(waits), 'median_wait_seconds': statistics.median(waits),
      'boundary_wait_seconds': [waits[e * per_epoch] for e in range(1, _EPOCHS.value + 1)]}


def _dispatch(k: int) -> dict:
  """The median seconds of a call of K steps until it returns, and until its results are
  ready, on idle devices."""
  config = loading.from_file(os.path.join(checkout.ROOT, 'configs', 'tiny.py'))
  config.train.steps_per_call = k
  checks.validate(config)
  length = config.data.max_length
  step, _, sequences = benchmark.prepared_step(config, None, length, warmup=2, packed=True)
  returned, ready = [], []
  for _ in range(_ROUNDS.value):
    start = time.perf_counter()
    metrics = step()
    returned.append(time.perf_counter() - start)
    jax.block_until_ready(metrics)
    ready.append(time.perf_counter() - start)
  return {'host_seconds_per_call': statistics.median(returned),
          'call_seconds': statistics.median(ready), 'batch_shape': [sequences, length]}


def main(argv):
  del argv
  result = {'input': _input_rate()}
  print(f'{result["input"]["batches_per_second"]:.0f} batches/s, longest next() '
        f'{result["input"]["longest_wait_seconds"]:.3f} s', flush=True)
  calls = {k: _dispatch(int(k)) for k in _KS.value}
  result['dispatch'] = {'config': 'configs/tiny.py', 'calls': _ROUNDS.value,
                        'devices': jax.device_count(), **{
                            name: {k: figures[name] for k, figures in calls.items()}
                            for name in ('host_seconds_per_call', 'call_seconds', 'batch_shape')}}
  measure.write(result, _OUTPUT.value)


if __name__ == '__main__':
  app.run(main)
