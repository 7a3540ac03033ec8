r"""How far the quick start's dev BLEU moves with the CPU that runs it: `configs/tiny.py` trained
from scratch once per setting, and each run's dev BLEU and training losses side by side.

  python experiments/quickstart/variation.py \
      [--output=experiments/quickstart/variation/<this CPU>.json] [--settings=this CPU]

Floating-point sums come out differently on different CPUs: XLA vectorises for the instruction
set it finds (a wider vector or a fused multiply-add changes the order and the rounding of a
sum), and the thread pool splits work by the number of cores. The first bits that differ grow
over training, so two CPUs end with different models. The settings, each a fresh run on this
machine:
  this CPU      as found;
  one core      the same, pinned to one core (`taskset -c 0`): the thread pool splits nothing;
  XLA at AVX    XLA's code generation limited to AVX, no AVX2 or FMA
                (`XLA_FLAGS=--xla_cpu_max_isa=AVX`), as on a CPU that has no AVX2.
The settings show how far such differences move the result; the spread that counts is that
between machines: run the script on each CPU type, one JSON a machine in
experiments/quickstart/variation/, each naming its CPU (`provenance`) and its widest
vector instructions (`isa`). `--settings` runs only some settings (`--settings="this CPU"`: the
run as a user's).
"""

import json
import os
import platform
import subprocess
import sys
import tempfile

from absl import app, flags

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.storage import provenance
from transformer_jax.training import metrics_log

checkout = loading.import_sibling(__file__, '../tools/checkout')

_OUTPUT = flags.DEFINE_string('output', None, 'Also write the figures to this file.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')
_SETTINGS = flags.DEFINE_list('settings', None, 'Names of the settings to run (default: all).')

# (name, command prefix, XLA_FLAGS)
SETTINGS = (('this CPU', [], ''),
            ('one core', ['taskset', '-c', '0'], ''),
            ('XLA at AVX', [], '--xla_cpu_max_isa=AVX'))
_LOSS_STEPS = (50, 400, 1200)


def run(prefix: list[str], xla_flags: str, workdir: str) -> dict:
  """The quick start's command, with `workdir`, under `prefix` and `xla_flags`; its last dev
  BLEU and its training loss at _LOSS_STEPS."""
  # A compilation cache of its own (XDG_CACHE_HOME), so that no setting runs another's programs.
  env = {**os.environ, 'XLA_FLAGS': xla_flags, 'XDG_CACHE_HOME': f'{workdir}_cache'}
  command = [*prefix, sys.executable, '-m', 'transformer_jax.train', '--config=configs/tiny.py',
             f'--workdir={workdir}']
  done = subprocess.run(command, cwd=checkout.ROOT, env=env, capture_output=True, text=True)
  if done.returncode:
    raise RuntimeError(f'{" ".join(command)} failed:\n{done.stderr[-3000:]}')
  records = metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
  validation = [r for r in records if r['split'] == 'validation']
  train = {r['step']: r['loss'] for r in records if r['split'] == 'train'}
  return {'dev_bleu': validation[-1]['bleu'], 'step': validation[-1]['step'],
          'train_loss': {step: train[step] for step in _LOSS_STEPS if step in train}}


def isa() -> str:
  """The widest x86 vector instructions this CPU reports (/proc/cpuinfo's flags), which decide
  how XLA vectorises a sum; the machine's architecture elsewhere."""
  try:
    with open('/proc/cpuinfo') as f:
      cpu_flags = set(next(line for line in f if line.startswith('flags')).split(':')[1].split())
  except (OSError, StopIteration):
    return platform.machine()
  return next((name for name in ('avx512f', 'avx2', 'avx') if name in cpu_flags),
              platform.machine())


def main(argv):
  del argv
  names = [name for name, _, _ in SETTINGS]
  unknown = set(_SETTINGS.value or ()) - set(names)
  if unknown:
    raise app.UsageError(f'--settings: unknown {sorted(unknown)}; the settings are {names}')
  runs = []
  with tempfile.TemporaryDirectory() as scratch:
    for name, prefix, xla_flags in SETTINGS:
      if _SETTINGS.value and name not in _SETTINGS.value:
        continue
      figures = run(prefix, xla_flags, os.path.join(scratch, name.replace(' ', '_')))
      runs.append({'setting': name, 'prefix': prefix, 'xla_flags': xla_flags, **figures})
      print(f'{name}: dev BLEU {figures["dev_bleu"]:.2f} at step {figures["step"]}, training '
            f'loss {figures["train_loss"]}', flush=True)
  bleus = [r['dev_bleu'] for r in runs]
  result = {'config': 'configs/tiny.py', 'provenance': provenance.record(), 'isa': isa(),
            'runs': runs,
            'dev_bleu_range': [min(bleus), max(bleus)]}
  print(f'dev BLEU from {min(bleus):.2f} to {max(bleus):.2f}')
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w') as f:
      json.dump(result, f, indent=2)


if __name__ == '__main__':
  app.run(main)
