"""The sweep runner: rows trained and evaluated, figures tabulated, finished rows skipped."""

import csv
import json
import os
import subprocess
import sys

from conftest import SMALL

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sweep_file(tmp_path) -> str:
  fields = {**SMALL, 'data.tfds_data_dir': str(tmp_path / 'tfds'), 'train.num_train_steps': 20,
            'train.log_every_steps': 10, 'train.eval_every_steps': 20, 'train.eval_bleu': False,
            'train.num_eval_steps': 1, 'train.checkpoint_every_steps': 20}
  path = tmp_path / 'sweep.py'
  path.write_text(f'''
from configs import base

ROWS = {{'small': {{}}, 'wide': {{'model.d_ff': 128}}}}
PAPER = {{'small': (4.92, 25.8)}}


def get_config(row='small'):
  config = base.get_config()
  config.update_from_flattened_dict({{**{fields!r}, **ROWS[row]}})
  return config
''')
  return str(path)


def _sweep(*args) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', 'transformer_jax.sweep', *args], cwd=REPO,
                        capture_output=True, text=True)


def test_rows_run_are_tabulated_and_skipped_when_done(tmp_path):
  sweep, workdir, results = _sweep_file(tmp_path), tmp_path / 'run', tmp_path / 'results'
  done = _sweep(f'--sweep={sweep}', f'--workdir={workdir}', f'--results={results}')
  assert done.returncode == 0, done.stderr[-3000:]
  assert sorted(os.listdir(results)) == ['small.json', 'wide.json']
  with open(results / 'wide.json') as f:
    wide = json.load(f)
  assert wide['model']['d_ff'] == 128 and wide['steps'] == 20 and wide['beam_size'] == 4
  assert wide['split'] == 'validation' and wide['checkpoint_steps'] == [20]
  assert wide['perplexity'] > 1 and 0 <= wide['bleu_tokenized'] <= 100
  with open(workdir / 'table3.csv') as f:
    table = list(csv.DictReader(f))
  assert [r['row'] for r in table] == ['small', 'wide']
  assert table[0]['paper_bleu'] == '25.8' and table[1]['paper_bleu'] == ''
  assert float(table[1]['dev_ppl']) == round(wide['perplexity'], 2)
  assert '| small |' in (workdir / 'table3.md').read_text()
  assert (workdir / 'table3.png').stat().st_size > 0

  # A second run finds both rows done and trains nothing.
  mtime = os.path.getmtime(results / 'small.json')
  again = _sweep(f'--sweep={sweep}', f'--workdir={workdir}', f'--results={results}')
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout.count('done already') == 2
  assert os.path.getmtime(results / 'small.json') == mtime


def test_unknown_rows_are_an_error_before_training(tmp_path):
  result = _sweep(f'--sweep={_sweep_file(tmp_path)}', f'--workdir={tmp_path / "run"}',
                  '--rows=small,F9')
  assert result.returncode != 0
  assert 'F9 not in' in result.stderr
  assert not (tmp_path / 'run').exists()
