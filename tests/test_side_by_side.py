"""A sweep's groups side by side on the process's 8 (CPU) devices (`--devices_per_group`), and a
sweep shared by two processes (`--process_index`, `--process_count`): each group on its own
devices, several at once, every row's logged values, dev figures and final parameters
bit-identical to its group trained alone on as many devices."""

import csv
import json
import os
import random
import signal
import subprocess
import sys
import threading

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import REPO, xla_flags
from test_sweep import _sweep_file, signalled
from transformer_jax.sweep import group as sweep_group, run as sweep_run
from transformer_jax.training import checkpointing, metrics_log

# Four rows that differ only in the seed: four groups of one row, one device each, or two of two
# rows, two devices each (--together=2). Each group compiles its programs for its own devices:
# more groups would cost the suite seconds and test nothing more (which slot trains which group:
# test_sweep.py's tests of the plan).
ROWS = {f'seed{i}': {'seed': i} for i in range(4)}
# What a row's metrics.jsonl records that depends on the time taken, not on the training.
_TIMINGS = ('seconds', 'compile_seconds', 'step_time', 'target_tokens_per_second')


def _logged(workdir) -> list[dict]:
  return [{k: v for k, v in r.items() if k not in _TIMINGS}
          for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] in ('train', 'validation')]


def _params(workdir, step: int = 20):
  return ocp.StandardCheckpointer().restore(
      os.path.join(workdir, 'checkpoints', str(step), 'state'))['params']


def _swept(tmp_path_factory, name: str, devices_per_group: int, together: int) -> dict:
  """The ROWS swept side by side; returns the sweep file, the workdir, each group's
  devices (device ids, by its rows), and the most groups seen training or being evaluated at
  once."""
  tmp_path = tmp_path_factory.mktemp(name)
  sweep, workdir = _sweep_file(tmp_path, ROWS), tmp_path / 'run'
  devices, running, most, lock = {}, [0], [0], threading.Lock()
  run_group = sweep_group.run_group

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
    monkeypatch.setattr(sweep_group, 'run_group', spied)
    sweep_run.run(sweep, str(workdir), list(ROWS), together=together,
                  devices_per_group=devices_per_group)
  return {'sweep': sweep, 'workdir': workdir, 'devices': devices, 'most': most[0]}


@pytest.fixture(scope='module')
def one_device_each(tmp_path_factory) -> dict:
  """Four groups of one row, one device each (four devices busy, four idle)."""
  return _swept(tmp_path_factory, 'one_device_each', devices_per_group=1, together=1)


@pytest.fixture(scope='module')
def two_devices_each(tmp_path_factory) -> dict:
  """Two groups of two rows (four devices busy, four idle: a group's programs compile for its
  devices, and each group compiled costs the suite seconds). Each group against itself alone:
  `test_a_sweep_shared_by_two_processes_trains_each_row_once_and_resumes`, where each process
  trains one."""
  return _swept(tmp_path_factory, 'two_devices_each', devices_per_group=2, together=2)


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
def test_groups_on_a_device_each_equal_each_group_alone(one_device_each, tmp_path):
  devices = one_device_each['devices']
  assert sorted(devices) == [(row,) for row in ROWS]
  assert sorted(d for ids in devices.values() for d in ids) == list(range(4))  # one each
  assert one_device_each['most'] >= 2  # side by side
  for row in ROWS:
    with open(one_device_each['workdir'] / 'rows' / f'{row}.json') as f:
      result = json.load(f)
    assert result['provenance']['machine']['devices'] == 1
    assert [p['step'] for p in result['dev_curve']] == [20]
  # The group on the last device, alone on the first.
  last = next(group for group, ids in devices.items() if ids == [3])
  _assert_alone_equals(one_device_each, list(last), tmp_path)


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
def test_a_sweep_shared_by_two_processes_trains_each_row_once_and_resumes(two_devices_each):
  """`two_devices_each`'s sweep (two groups of two rows, two devices a group) shared by two
  processes of 4 devices (two slots each): each trains one group alone on its first two
  devices; a SIGTERM to the second as its group starts saves it and stops it, the first
  finishes its own, and no table is written; both started again, the group left is trained
  from its checkpoints and the table written once. Every row's figures, final parameters and
  logged values (but the 'train' records around the stop, which average fewer steps) equal
  those of `two_devices_each`, where the groups trained side by side on one process's 8
  devices."""
  workdir = two_devices_each['workdir'].parent / 'shared'
  env = {**os.environ, 'XLA_FLAGS': xla_flags(4)}
  commands = [_sweep_command(two_devices_each['sweep'], workdir, f'--rows={",".join(ROWS)}',
                             '--together=2', f'--process_index={i}', '--process_count=2')
              for i in range(2)]
  first, second = (subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for command in commands)
  seen = []
  for line in second.stdout:
    seen.append(line)
    if line.startswith('seed2, seed3: training in'):  # its group, on its devices 0 and 1
      second.send_signal(signal.SIGTERM)
      break
  out = ''.join(seen) + second.communicate()[0]
  assert second.returncode != 0 and 'run the sweep again' in out, out[-3000:]
  assert 'process 1 of 2: slots 1, 3' in out and 'on devices 0, 1' in out
  out = first.communicate()[0]
  assert first.returncode == 0, out[-3000:]
  assert 'process 0 of 2: slots 0, 2' in out
  assert 'its share done; seed2, seed3 not yet' in out
  results = workdir / 'rows'
  assert sorted(os.listdir(results)) == ['seed0.json', 'seed1.json']
  assert not (workdir / 'table3_tiny.md').exists()
  stopped = max(checkpointing.saved_steps(workdir / 'seed2'), default=0)
  assert 0 < stopped < 20  # saved and stopped short of its last step

  restarted = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for command in commands]
  outs = [process.communicate()[0] for process in restarted]
  assert all(process.returncode == 0 for process in restarted), outs[0][-2000:] + outs[1][-2000:]
  lines = [line for out in outs for line in out.splitlines()]
  assert sum('done already' in line for line in lines) == 4  # seed0 and seed1, by each
  assert sum(line.startswith('seed2, seed3: training in') for line in lines) == 1  # once
  with open(workdir / 'table3_tiny.csv') as f:
    assert [r['row'] for r in csv.DictReader(f)] == list(ROWS)

  for row in ROWS:
    logged, side_by_side = _last_logged(workdir / row), _last_logged(
        two_devices_each['workdir'] / row)
    if row in ('seed2', 'seed3'):
      side_by_side = {k: v for k, v in side_by_side.items()
                      if k[0] == 'validation' or k[1] > stopped + 10}
      logged = {k: v for k, v in logged.items() if k in side_by_side}
    assert logged == side_by_side and logged, row
    with open(results / f'{row}.json') as f, \
        open(two_devices_each['workdir'] / 'rows' / f'{row}.json') as g:
      shared, together = json.load(f), json.load(g)
    for key in ('perplexity', 'bleu_tokenized', 'dev_curve', 'checkpoint_steps', 'together'):
      assert shared[key] == together[key], (row, key)
    with open(shared['hypotheses']) as f, open(together['hypotheses']) as g:
      assert f.read() == g.read(), row
    jax.tree.map(np.testing.assert_array_equal, _params(workdir / row),
                 _params(two_devices_each['workdir'] / row))


@pytest.mark.slow
def test_groups_side_by_side_stopped_by_sigterm_or_killed_resume_to_their_figures(
    one_device_each, tmp_path):
  """`one_device_each`'s four groups, one a device, in a process stopped by SIGTERM once
  the fourth has started (every group in flight saved, the sweep's error saying to run it
  again), then killed (SIGKILL) at a random moment after a group has started again, then run
  again here: every row's dev curve, figures, hypotheses and final parameters equal
  `one_device_each`'s."""
  rows, workdir = list(ROWS), tmp_path / 'run'
  command = [*_sweep_command(one_device_each['sweep'], workdir, f'--rows={",".join(rows)}'),
             '--devices_per_group=1']
  out, status = signalled(command, (f'{rows[-1]}: training in',), signal.SIGTERM)
  assert status != 0 and 'run the sweep again' in out and 'Traceback' not in out, out[-3000:]
  for row in rows:  # finished, or saved where the SIGTERM found it
    assert ((workdir / 'rows' / f'{row}.json').exists()
            or checkpointing.saved_steps(workdir / row)), (row, out[-3000:])
  # A group that had not finished starts again; killed within half a second of it, before it
  # can have trained and been evaluated.
  seed = int(os.environ.get('TRANSFORMER_JAX_KILL_SEED', random.randrange(2**32)))
  delay = random.Random(seed).uniform(0.0, 0.5)
  where = f'killed {delay:.2f} s after a group started (TRANSFORMER_JAX_KILL_SEED={seed})'
  print(where)
  out, status = signalled(command, tuple(f'{row}: training in' for row in rows), signal.SIGKILL,
                         delay)
  assert status == -signal.SIGKILL, (where, out[-3000:])
  sweep_run.run(one_device_each['sweep'], str(workdir), rows, devices_per_group=1)
  for row in rows:
    with open(workdir / 'rows' / f'{row}.json') as f, \
        open(one_device_each['workdir'] / 'rows' / f'{row}.json') as g:
      resumed, side_by_side = json.load(f), json.load(g)
    for key in ('perplexity', 'bleu_tokenized', 'dev_curve', 'checkpoint_steps'):
      assert resumed[key] == side_by_side[key], (row, key, where)
    jax.tree.map(np.testing.assert_array_equal, _params(workdir / row),
                 _params(one_device_each['workdir'] / row))
