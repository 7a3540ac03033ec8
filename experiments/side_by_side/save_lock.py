r"""How long groups side by side wait for one another's checkpoint saves: four threads each
save a train state of the regularised Table 3 base row (its parameters and Adam's moments, as
`Trainer` makes them) at the same moments, as four slots whose groups checkpoint at one step do.

  python experiments/side_by_side/save_lock.py --output=experiments/side_by_side/save_lock_cpu.json

Orbax starts one save at a time in a process (`training/checkpointing.py`'s lock: its operation
counter); a save first waits, outside that lock, for its own run's previous save. Per save the
file holds the seconds a thread waited for the lock and the seconds it held it (the state copied
off the devices, the write handed to orbax's background thread), over `--rounds` rounds of four
saves at once, and the state's size.
"""

import contextlib
import json
import os
import tempfile
import threading
import time

from absl import flags
import jax

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, provenance
from transformer_jax.sweep import plan
from transformer_jax.training import checkpointing
from transformer_jax.training.trainer import Trainer

checkout = loading.import_sibling(__file__, '../tools/checkout')

SLOTS = 4


class _TimedLock:
  """`checkpointing._SAVING` with each acquisition's wait and hold timed."""

  def __init__(self, lock):
    self._lock, self.waits, self.holds, self._local = lock, [], [], threading.local()

  def __enter__(self):
    start = time.perf_counter()
    self._lock.acquire()
    self._local.acquired = time.perf_counter()
    self.waits.append(self._local.acquired - start)

  def __exit__(self, *exc_info):
    self.holds.append(time.perf_counter() - self._local.acquired)
    self._lock.release()


def main():
  sweep = loading.load_sweep(os.path.join(checkout.ROOT, 'experiments', 'table3_regularised',
                                          'sweep.py'))
  config = plan.row_config(sweep, 'base', [])
  state = Trainer(ShardedModel(config)).init_state()
  size = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
  timed = _TimedLock(checkpointing._SAVING)  # pylint: disable=protected-access
  checkpointing._SAVING = timed  # pylint: disable=protected-access
  start = threading.Barrier(SLOTS)
  with tempfile.TemporaryDirectory() as directory:

    def slot(index):
      with contextlib.closing(checkpointing.Checkpoints(
          os.path.join(directory, str(index)), keep=2)) as saved:
        for step in range(1, _ROUNDS.value + 1):
          start.wait()
          saved.save(step, state, {'position': step})

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(SLOTS)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
  result = {'slots': SLOTS, 'rounds': _ROUNDS.value, 'state_bytes': size,
            'lock_wait_seconds': timed.waits, 'lock_hold_seconds': timed.holds,
            'mean_wait_seconds': sum(timed.waits) / len(timed.waits),
            'mean_hold_seconds': sum(timed.holds) / len(timed.holds),
            'provenance': provenance.record()}
  atomic.write(_OUTPUT.value, json.dumps(result, indent=1) + '\n')
  print(json.dumps({k: v for k, v in result.items() if k.startswith(('mean', 'state'))}))


if __name__ == '__main__':
  _OUTPUT = flags.DEFINE_string('output', None, 'Where the figures go (JSON).', required=True)
  _ROUNDS = flags.DEFINE_integer('rounds', 10, 'Rounds of four saves at once.')
  cli.run(main)
