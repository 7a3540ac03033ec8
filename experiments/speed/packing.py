r"""Real target tokens per second of training with and without packing, interleaved.

  python experiments/speed/packing.py [--manual_dir=DIR] \
      [--config=configs/multi30k.py] [--pack_lengths=0,64] [--steps=300] [--rounds=2] \
      [--output=experiments/speed/packing_cpu.json]

Trains `--config` from scratch for `--steps` steps once per pack length (0: no packing), in
turn, `--rounds` rounds (in reverse order every other round), each in a fresh temporary
workdir. A run's figure is its
`target_tokens_per_second` (non-padding target tokens over wall time, as the training log
reports it) averaged over its log windows after the first (which holds the compilations).
Prints each run and, per pack length, the mean and its ratio to the first pack length's.
"""

import os
import subprocess
import sys
import tempfile

from absl import app, flags
import numpy as np

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.training import metrics_log

measure = loading.import_sibling(__file__, '../tools/measure')
multi30k_raw = loading.import_sibling(__file__, '../tools/multi30k_raw')


_CONFIG = flags.DEFINE_string('config', 'configs/multi30k.py', 'The config file to train.')
_MANUAL_DIR = flags.DEFINE_string('manual_dir', None, "Multi30k's raw files (default: downloaded "
                                  'once, experiments/tools/multi30k_raw.py).')
_PACK_LENGTHS = flags.DEFINE_list('pack_lengths', ['0', '64'], 'Pack lengths to compare.')
_STEPS = flags.DEFINE_integer('steps', 300, 'Training steps per run.')
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Rounds over the pack lengths.')
cli.renamed('repeats', 'rounds', 'how many times each variant is timed')
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')


def _run(pack_length: int, workdir: str) -> float:
  steps = _STEPS.value
  subprocess.run(
      [sys.executable, '-m', 'transformer_jax.train', f'--config={_CONFIG.value}',
       f'--workdir={workdir}',
       f'--config.data.manual_dir={multi30k_raw.directory(_MANUAL_DIR.value)}',
       '--config.data.preprocessing=none',  # the raw text every committed figure had
       f'--config.data.pack_length={pack_length}', f'--config.train.num_train_steps={steps}',
       f'--config.train.eval_every_steps={steps}', '--config.train.eval_bleu=false',
       f'--config.train.checkpoint_every_steps={steps}'],
      check=True, stdout=subprocess.DEVNULL)
  windows = [r for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
             if r['split'] == 'train']
  return float(np.mean([w['target_tokens_per_second'] for w in windows[1:]]))


def main(argv):
  del argv
  pack_lengths = [int(p) for p in _PACK_LENGTHS.value]
  with tempfile.TemporaryDirectory() as root:
    rounds = measure.interleaved(
        [str(p) for p in pack_lengths], _ROUNDS.value,
        lambda p: _run(int(p), tempfile.mkdtemp(prefix=f'pack{p}_', dir=root)))
  runs = {p: [r[str(p)] for r in rounds] for p in pack_lengths}
  first = float(np.mean(runs[pack_lengths[0]]))
  figures = {'config': _CONFIG.value, 'steps': _STEPS.value, 'runs': {}}
  for p in pack_lengths:
    mean = float(np.mean(runs[p]))
    figures['runs'][p] = {'target_tokens_per_second': runs[p], 'mean': mean,
                          'ratio': mean / first}
    print(f'pack_length {p:3d}: mean {mean:.0f} target tokens/s, {mean / first:.2f}x')
  measure.write(figures, _OUTPUT.value)


if __name__ == '__main__':
  app.run(main)
