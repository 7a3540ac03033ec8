"""A sweep's groups side by side on the process's 8 (CPU) devices (`--devices_per_group`), and a
sweep shared by two processes (`--process_index`, `--process_count`): each group on its own
devices, several at once, every row's logged values, dev figures and final parameters
bit-identical to its group trained alone on as many devices."""

import csv
import json
import os
import signal
import subprocess
import sys
import threading

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import REPO, xla_flags
from test_sweep import _sweep_file
from transformer_jax.sweep import run as sweep_run
from transformer_jax.training import checkpointing, metrics_log

# Eight rows that differ only in the seed: 8 groups of one row, or 4 of two (--together=2).
ROWS = {f'seed{i}': {'seed': i} for i in range(8)}
# What a row's metrics.jsonl records that depends on the time taken, not on the training.
_TIMINGS = ('seconds', 'compile_seconds', 'step_time', 'target_tokens_per_second')


def _logged(workdir) -> list[dict]:
  return [{k: v for k, v in r.items() if k not in _TIMINGS}
          for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] in ('train', 'validation')]


def _params(workdir, step: int = 20):
  return ocp.StandardCheckpointer().restore(
      os.path.join(workdir, 'checkpoints', str(step), 'state'))['params']


def _swept(tmp_path_factory, name: str, devices_per_group: int, together: int,
           rows: int = 8) -> dict:
  """The first `rows` rows swept side by side; returns the sweep file, the workdir, each group's
  devices (device ids, by its rows), and the most groups seen training or being evaluated at
  once."""
  tmp_path = tmp_path_factory.mktemp(name)
  sweep, workdir = _sweep_file(tmp_path, ROWS), tmp_path / 'run'
  devices, running, most, lock = {}, [0], [0], threading.Lock()
  run_group = sweep_run.run_group

  def spied(group, *args, **kwargs):
    with lock:
      devices[tuple(group)] = [d.id for d in kwargs.get('devices', args[6] if len(args) > 6
                                                       else None)]
      running[0] += 1
      most[0] = max(most[0], running[0])
    try:
      return run_group(group, *args, **kwargs)
    finally:
      with lock:
        running[0] -= 1

  with pytest.MonkeyPatch.context() as monkeypatch:
    monkeypatch.setattr(sweep_run, 'run_group', spied)
    sweep_run.run(sweep, str(workdir), list(ROWS)[:rows], together=together,
                  devices_per_group=devices_per_group)
  return {'sweep': sweep, 'workdir': workdir, 'devices': devices, 'most': most[0]}


@pytest.fixture(scope='module')
def one_device_each(tmp_path_factory) -> dict:
  return _swept(tmp_path_factory, 'one_device_each', devices_per_group=1, together=1)


@pytest.fixture(scope='module')
def two_devices_each(tmp_path_factory) -> dict:
  """Two groups of two rows (four devices busy, four idle: a group's programs compile for its
  devices, and each group compiled costs the suite seconds)."""
  return _swept(tmp_path_factory, 'two_devices_each', devices_per_group=2, together=2, rows=4)


def _assert_alone_equals(swept: dict, group: list[str], tmp_path) -> None:
  """`group` of `swept` trained again alone (on the first slot's devices): every value its rows
  logged, their figures and final parameters bit-identical."""
  alone = tmp_path / 'alone'
  sweep_run.run(swept['sweep'], str(alone), group, together=len(group),
                devices_per_group=len(swept['devices'][tuple(group)]))
  for row in group:
    assert _logged(alone / row) == _logged(swept['workdir'] / row), row
    with open(alone / 'rows' / f'{row}.json') as f, \
        open(swept['workdir'] / 'rows' / f'{row}.json') as g:
      by_itself, side_by_side = json.load(f), json.load(g)
    for key in ('perplexity', 'bleu_tokenized', 'bleu_detokenized', 'bleu_tokenized_lowercase',
                'dev_curve', 'checkpoint_steps', 'together'):
      assert by_itself[key] == side_by_side[key], (row, key)
    with open(by_itself['hypotheses']) as f, open(side_by_side['hypotheses']) as g:
      assert f.read() == g.read(), row
    jax.tree.map(np.testing.assert_array_equal, _params(alone / row),
                 _params(swept['workdir'] / row))


@pytest.mark.slow
def test_eight_groups_on_a_device_each_equal_each_group_alone(one_device_each, tmp_path):
  devices = one_device_each['devices']
  assert sorted(devices) == [(row,) for row in ROWS]
  assert sorted(d for ids in devices.values() for d in ids) == list(range(8))  # one each
  assert one_device_each['most'] >= 2  # side by side
  for row in ROWS:
    with open(one_device_each['workdir'] / 'rows' / f'{row}.json') as f:
      result = json.load(f)
    assert result['provenance']['machine']['devices'] == 1
    assert [p['step'] for p in result['dev_curve']] == [20]
  # The group on the last device, alone on the first.
  last = next(group for group, ids in devices.items() if ids == [7])
  _assert_alone_equals(one_device_each, list(last), tmp_path)


@pytest.mark.slow
def test_groups_on_two_devices_each_equal_each_group_alone(two_devices_each, tmp_path):
  devices = two_devices_each['devices']
  assert devices == {('seed0', 'seed1'): [0, 1], ('seed2', 'seed3'): [2, 3]}
  assert two_devices_each['most'] == 2
  last = next(group for group, ids in devices.items() if ids == [2, 3])
  _assert_alone_equals(two_devices_each, list(last), tmp_path)


def test_devices_per_group_must_divide_the_devices(tmp_path):
  with pytest.raises(ValueError, match='--devices_per_group=3 must divide the 8 devices'):
    sweep_run.run(_sweep_file(tmp_path, ROWS), str(tmp_path / 'run'), devices_per_group=3)
  assert not (tmp_path / 'run').exists()


def test_a_mesh_that_needs_more_devices_than_a_group_has_is_refused(tmp_path):
  with pytest.raises(ValueError, match=r'row seed0, on 2 devices a group: .*needs 4 devices'):
    sweep_run.run(_sweep_file(tmp_path, ROWS), str(tmp_path / 'run'),
                  overrides=['parallel.data=4'], devices_per_group=2)
  assert not (tmp_path / 'run').exists()


def _sweep_command(sweep: str, workdir, *flags: str) -> list[str]:
  return [sys.executable, '-m', 'transformer_jax.sweep', f'--sweep={sweep}',
          f'--workdir={workdir}', '--devices_per_group=2', *flags]


def _last_logged(workdir) -> dict:
  """(split, step) -> the last record of that step, timings left out (a resumed run logs again
  the steps after its checkpoint)."""
  return {(r['split'], r['step']): r for r in _logged(workdir)}


@pytest.mark.slow
def test_a_sweep_shared_by_two_processes_trains_each_row_once_and_resumes(tmp_path):
  """Two processes of 4 devices each share 4 groups of a row (2 devices a group, 2 slots a
  process): each trains its own; a SIGTERM to the second while its groups train saves them and
  stops it, the first finishes its share, and no table is written; both started again, the
  rows left are trained from their checkpoints and the table is written once. Every row's
  logged values, figures and final parameters equal its group's trained alone in a process of
  4 devices."""
  rows = {f'seed{i}': {'seed': i, 'train.num_train_steps': 100} for i in range(4)}
  sweep, workdir = _sweep_file(tmp_path, rows), tmp_path / 'run'
  env = {**os.environ, 'XLA_FLAGS': xla_flags(4)}
  commands = [_sweep_command(sweep, workdir, f'--process_index={i}', '--process_count=2')
              for i in range(2)]
  first = subprocess.Popen(commands[0], cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
  second = subprocess.Popen(commands[1], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
  seen = []
  for line in second.stdout:  # its second slot's group training: both slots' groups in flight
    seen.append(line)
    if line.startswith('seed3: training in'):
      second.send_signal(signal.SIGTERM)
      break
  out = ''.join(seen) + second.communicate()[0]
  assert second.returncode != 0 and 'run the sweep again' in out, out[-3000:]
  assert 'Preempted (SIGTERM)' in out, out[-3000:]
  out = first.communicate()[0]
  assert first.returncode == 0, out[-3000:]
  results = workdir / 'rows'
  missing = [row for row in rows if not (results / f'{row}.json').exists()]
  assert missing in (['seed2', 'seed3'], ['seed3']), missing  # seed2 may have finished first
  assert 'process 0 of 2: slots 0 to 1' in out
  assert f'its share done; {", ".join(missing)} not yet' in out
  assert not (workdir / 'table3_tiny.md').exists()
  stopped = max(checkpointing.saved_steps(workdir / 'seed3'), default=0)
  assert 0 < stopped < 100  # saved and stopped short of its last step

  restarted = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for command in commands]
  outs = [process.communicate()[0] for process in restarted]
  assert all(process.returncode == 0 for process in restarted), outs[0][-2000:] + outs[1][-2000:]
  assert sorted(os.listdir(results)) == [f'seed{i}.json' for i in range(4)]
  lines = [line for out in outs for line in out.splitlines()]
  assert sum('done already' in line for line in lines) == 2 * (len(rows) - len(missing))
  for row in missing:  # by one process
    assert sum(line.startswith(f'{row}: training in') for line in lines) == 1, row
  with open(workdir / 'table3_tiny.csv') as f:
    assert [r['row'] for r in csv.DictReader(f)] == list(rows)

  # Each group alone in a process of 4 devices (on its first two).
  alone = tmp_path / 'alone'
  result = subprocess.run(_sweep_command(sweep, alone, '--rows=seed1,seed3'), cwd=REPO, env=env,
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-3000:]
  for row in ('seed1', 'seed3'):  # trained through once, and stopped and resumed
    # Each 'train' record averages the steps since the one before: the first after the resumed
    # step (and the one the SIGTERM's save wrote) covers fewer steps.
    logged, shared = _last_logged(alone / row), _last_logged(workdir / row)
    if row == 'seed3':
      logged = {k: v for k, v in logged.items() if k[0] == 'validation' or k[1] > stopped + 10}
      shared = {k: v for k, v in shared.items() if k in logged}
    assert len(logged) >= 5 and logged == shared, row
    with open(alone / 'rows' / f'{row}.json') as f, open(results / f'{row}.json') as g:
      by_itself, shared = json.load(f), json.load(g)
    for key in ('perplexity', 'bleu_tokenized', 'dev_curve', 'checkpoint_steps'):
      assert by_itself[key] == shared[key], (row, key)
    jax.tree.map(np.testing.assert_array_equal, _params(alone / row, 100),
                 _params(workdir / row, 100))
