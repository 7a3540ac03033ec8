r"""The sweep's time outside training steps, before and after a change: the sweep of
`sweep.py` here (three groups of two rows, `--together=2`) run from two checkouts in
interleaved rounds, each run in a fresh workdir and compilation cache, on the built-in corpus's
first 4000 training and 100 dev pairs as text files (`--override=data.dataset=files`), so that a
row's evaluation is a small part of its time, as a dev split is of a real row's.

  python experiments/sweep_overhead/measure.py --before=/tmp/before_checkout \
      --rounds=2 --output=experiments/sweep_overhead/cpu.json

Per run: the wall time of the command; the seconds in training steps (each group's 'train'
records: step time times the steps logged, from its first row's metrics.jsonl); the seconds
outside them per group ((wall - steps) / groups: process starts, data, vocabulary, compiling,
evaluation, checkpoints); the processes of Python started (a `sitecustomize` on PYTHONPATH
records every interpreter that starts, the sweep's own included); the programs compiled (the
training runs' 'compile' records, the evaluations' counts and those compiled ahead, none loaded
from a cache: each run has its own); the groups whose programs were compiled ahead
(`transformer_jax/sweep/ahead.py`), and the wall seconds of that compiling; and each group's
share: its training's seconds outside the steps (data, compiling, checkpoints, the dev
evaluation) and its evaluation's. Each variant's figures are printed as a JSON line as soon as
they are measured (`measure.interleaved`): those lines are the result of a run stopped early.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from transformer_jax import cli
from transformer_jax.config import loading
from transformer_jax.data import builtin_grammar
from transformer_jax.training import metrics_log

checkout = loading.import_sibling(__file__, '../tools/checkout')
measure = loading.import_sibling(__file__, '../tools/measure')

_BEFORE = flags.DEFINE_string('before', None, 'A checkout of the commit to compare with.',
                              required=True)
_ROUNDS = flags.DEFINE_integer('rounds', 2, 'Interleaved rounds (before, now; now, before).')
_OUTPUT = flags.DEFINE_string('output', None, 'Where the figures go (JSON).')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')

_SWEEP = os.path.join(checkout.ROOT, 'experiments', 'sweep_overhead', 'sweep.py')
_SITECUSTOMIZE = ('import os, sys\n'
                  'with open(os.environ["SWEEP_OVERHEAD_PROCESSES"], "a") as f:\n'
                  '  f.write(" ".join(sys.orig_argv[:4]) + "\\n")\n')


def _steps_seconds(workdir: str) -> float:
  """Seconds of training steps in a run's 'train' records."""
  records = [r for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
             if r['split'] == 'train']
  seconds, previous = 0.0, 0
  for record in records:
    seconds += record['step_time'] * (record['step'] - previous)
    previous = record['step']
  return seconds


def _programs(workdir: str, rows: dict) -> int:
  """Programs a run of the sweep compiled: each group's training (its first row's 'compile'
  records but the summaries), evaluation (its first row's evaluation JSON for a group
  evaluated as one program, every row's otherwise) and what was compiled for it ahead."""
  total = 0
  for group in {tuple(r['together']['rows']) for r in rows.values()}:
    total += (rows[group[0]].get('compiled_ahead') or {}).get('compiled', 0)
    records = metrics_log.read(os.path.join(workdir, group[0], 'metrics.jsonl'))
    total += sum(r['compiled'] for r in records if r['split'] == 'compile'
                 and r['what'] not in ('startup', 'the whole run'))
    for row in group[:1] if rows[group[0]].get('evaluated_together') else group:
      directory = os.path.join(workdir, row, 'eval')
      for name in os.listdir(directory):
        if name.endswith('.json'):
          with open(os.path.join(directory, name)) as f:
            total += json.load(f)['programs_compiled']
  return total


def corpus(directory: str) -> list[str]:
  """The built-in corpus's first 4000 training and 100 dev pairs written as text files in
  `directory`: the sweep's --override flags that train on them."""
  splits = builtin_grammar.splits(seed=0)
  for split, size in (('train', 4000), ('validation', 100)):
    for side, lang in enumerate(('en', 'de')):
      with open(os.path.join(directory, f'{split}.{lang}'), 'w', encoding='utf-8') as f:
        f.writelines(pair[side] + '\n' for pair in splits[split][:size])
  return ['--override=data.dataset=files',
          f'--override=data.train_files={directory}/train.{{lang}}',
          f'--override=data.validation_files={directory}/validation.{{lang}}']


def run_sweep(checkout: str, overrides: list[str]) -> dict:
  """The sweep run once from `checkout` with `overrides`, in a fresh workdir and cache: its
  figures."""
  scratch = tempfile.mkdtemp()
  try:
    processes = os.path.join(scratch, 'processes.txt')
    site = os.path.join(scratch, 'site')
    os.makedirs(site)
    with open(os.path.join(site, 'sitecustomize.py'), 'w') as f:
      f.write(_SITECUSTOMIZE)
    workdir = os.path.join(scratch, 'run')
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([site, checkout]),
           'SWEEP_OVERHEAD_PROCESSES': processes, 'XDG_CACHE_HOME': os.path.join(scratch, 'cache'),
           'TFDS_DATA_DIR': os.path.join(scratch, 'tfds')}
    start = time.perf_counter()
    subprocess.run([sys.executable, '-m', 'transformer_jax.sweep', f'--sweep={_SWEEP}',
                    f'--workdir={workdir}', '--together=2', *overrides], cwd=checkout, env=env,
                   check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rows = {}
    for name in os.listdir(os.path.join(workdir, 'rows')):
      with open(os.path.join(workdir, 'rows', name)) as f:
        rows[name[:-len('.json')]] = json.load(f)
    groups = {tuple(r['together']['rows']) for r in rows.values()}
    steps = sum(_steps_seconds(os.path.join(workdir, group[0])) for group in groups)
    with open(processes) as f:
      started = [line.strip() for line in f if line.strip()]
    ahead = [rows[group[0]].get('compiled_ahead') for group in groups]
    per_group = []
    for group in sorted(groups):
      first = rows[group[0]]
      evaluations = group[:1] if first.get('evaluated_together') else group
      per_group.append({
          'rows': list(group),
          'training_outside_steps_seconds':
              first['train_seconds'] - _steps_seconds(os.path.join(workdir, group[0])),
          'evaluation_seconds': sum(rows[row]['eval_seconds'] for row in evaluations)})
    return {'wall_seconds': wall, 'steps_seconds': steps, 'groups': len(groups),
            'groups_compiled_ahead': sum(bool(a and a['used']) for a in ahead),
            'ahead_seconds': sum(a['seconds'] for a in ahead if a),
            'outside_steps_per_group': (wall - steps) / len(groups),
            'python_processes': len(started),
            'package_processes': sum('transformer_jax' in line for line in started),
            'programs_compiled': _programs(workdir, rows), 'per_group': per_group,
            'dev_perplexity': {row: r['perplexity'] for row, r in sorted(rows.items())}}
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def main(argv):
  del argv
  checkouts = {'before': os.path.abspath(_BEFORE.value), 'now': checkout.ROOT}
  data = tempfile.mkdtemp()
  overrides = corpus(data)
  rounds = measure.interleaved(list(checkouts), _ROUNDS.value,
                               lambda variant: run_sweep(checkouts[variant], overrides))
  shutil.rmtree(data)
  medians = {variant: {key: measure.medians([{variant: r[variant][key]} for r in rounds])[variant]
                       for key in ('wall_seconds', 'steps_seconds', 'outside_steps_per_group')}
             for variant in checkouts}
  measure.write({'sweep': 'experiments/sweep_overhead/sweep.py', 'together': 2,
                 'overrides': [o.replace(data, 'DATA') for o in overrides],
                 'rounds': rounds, 'median': medians,
                 'outside_steps_per_group_now_over_before':
                     medians['now']['outside_steps_per_group']
                     / medians['before']['outside_steps_per_group']}, _OUTPUT.value)


if __name__ == '__main__':
  app.run(main)
