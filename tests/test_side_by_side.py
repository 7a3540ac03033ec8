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
import time

from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import REPO, xla_flags
from test_sweep import _sweep_file, signalled
from transformer_jax.config import loading
from transformer_jax.loop import train_metrics
from transformer_jax.storage import workdirs
from transformer_jax.sweep import group as sweep_group, run as sweep_run
from transformer_jax.training import checkpointing, metrics_log

overlap = loading.import_sibling(__file__, '../experiments/side_by_side/overlap')

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
  return ocp.StandardCheckpointer().restore(epath.Path(workdir, 'checkpoints', str(step), 'params'))


def _swept(tmp_path_factory, name: str, devices_per_group: int, together: int) -> dict:
  """The ROWS swept side by side; returns the sweep file, the workdir, each group's
  devices (device ids, by its rows), and each group's time on its devices: from its first
  step's start to the fetch of its last step's metrics (which waits for the step to finish on
  the device), monotonic seconds."""
  tmp_path = tmp_path_factory.mktemp(name)
  sweep, workdir = _sweep_file(tmp_path, ROWS), tmp_path / 'run'
  devices, spans, lock = {}, {}, threading.Lock()
  run_group = sweep_group.run_group
  started, summaries = train_metrics.TrainMetrics.__init__, train_metrics.TrainMetrics.summaries

  def spied(group, *args, **kwargs):
    with lock:
      devices[tuple(group)] = [d.id for d in kwargs.get('devices', args[6] if len(args) > 6
                                                       else None)]
    return run_group(group, *args, **kwargs)

  def start(metrics, *args):
    started(metrics, *args)
    with lock:
      spans[threading.get_ident(), id(metrics)] = [time.monotonic(), None]

  def fetched(metrics, names):
    result = summaries(metrics, names)
    with lock:
      spans[threading.get_ident(), id(metrics)][1] = time.monotonic()
    return result

  with pytest.MonkeyPatch.context() as monkeypatch:
    monkeypatch.setattr(sweep_group, 'run_group', spied)
    monkeypatch.setattr(train_metrics.TrainMetrics, '__init__', start)
    monkeypatch.setattr(train_metrics.TrainMetrics, 'summaries', fetched)
    sweep_run.run(sweep, str(workdir), list(ROWS), together=together,
                  devices_per_group=devices_per_group)
  return {'sweep': sweep, 'workdir': workdir, 'devices': devices,
          'spans': sorted(tuple(span) for span in spans.values())}


def test_overlapping_counts_the_time_two_spans_run_at_once():
  overlapping = overlap.overlapping
  assert overlapping([(0.0, 2.0), (1.0, 3.0)]) == 1.0
  assert overlapping([(0.0, 1.0), (1.0, 2.0), (3.0, 4.0)]) == 0.0
  assert overlapping([(0.0, 4.0), (1.0, 2.0), (1.5, 3.0)]) == 2.0


@pytest.fixture(scope='module')
def one_device_each(tmp_path_factory) -> dict:
  """Four groups of one row, one device each (four devices busy, four idle)."""
  return _swept(tmp_path_factory, 'one_device_each', devices_per_group=1, together=1)


@pytest.fixture(scope='module')
def two_devices_each(tmp_path_factory) -> dict:
  """Two groups of two rows (four devices busy, four idle: a group's programs compile for its
  devices, and each group compiled costs the suite seconds). Each group against itself
  interrupted: `test_a_sweep_shared_in_a_bucket_whose_processes_are_killed_mid_group_is_
  finished_alone`."""
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
  used = sorted(d for ids in devices.values() for d in ids)
  assert len(used) == len(set(used)) == 4  # one device each, of the 8 slots
  # Side by side: the groups' device work overlaps in time (serialised groups: 0 s).
  spans = one_device_each['spans']
  assert len(spans) == 4 and overlap.overlapping(spans) > 0, spans
  for row in ROWS:
    with open(one_device_each['workdir'] / 'rows' / f'{row}.json') as f:
      result = json.load(f)
    assert result['provenance']['machine']['devices'] == 1
    assert [p['step'] for p in result['dev_curve']] == [20]
  # The group on the last device used, alone on the first.
  last = next(group for group, ids in devices.items() if ids == [used[-1]])
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


def _started(command: list[str], env: dict) -> subprocess.Popen:
  return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _kill_when(process: subprocess.Popen, line_starts: tuple[str, ...],
               ready=lambda line: True) -> tuple[str, str]:
  """Reads `process`'s output until a line starting with one of `line_starts`, waits for
  `ready(line)` (at most 60 s), then kills it (SIGKILL); (its output, the line). Fails unless
  it was ready and the kill is what ended it."""
  seen = []
  for line in process.stdout:
    seen.append(line)
    if line.startswith(line_starts):
      deadline = time.monotonic() + 60
      while not ready(line) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
      was_ready = ready(line)
      process.kill()
      out = ''.join(seen) + process.communicate()[0]
      assert was_ready and process.returncode == -signal.SIGKILL, out[-3000:]
      return out, line
  raise AssertionError(''.join(seen)[-3000:])


@pytest.mark.slow
def test_a_sweep_shared_in_a_bucket_whose_processes_are_killed_mid_group_is_finished_alone(
    two_devices_each, in_emulator):
  """`two_devices_each`'s sweep (two groups of two rows, two devices a group) shared by two
  processes of two devices (one slot each) through a bucket (claims are leases there,
  `leases`): no shared disk. The second is killed (SIGKILL) once its group has saved a
  checkpoint and the first holds the other group: the first, its own group done, takes the
  dead one's over (its holder has ended on this host); killed too as that group starts, every
  process is dead. The second, started again alone, finishes every row and writes the table;
  the first, started again, finds every row done and leaves the table as it is. Each row
  trained by one process at a time; every row's figures, hypotheses and final parameters those
  of `two_devices_each`, where the groups trained uninterrupted on a local disk (whose claims,
  flocks, tests/test_claims.py tests)."""
  workdir = f'gs://{in_emulator.bucket()}/shared'
  env = {**in_emulator.environment(), 'XLA_FLAGS': xla_flags(2)}
  commands = [_sweep_command(two_devices_each['sweep'], workdir, f'--rows={",".join(ROWS)}',
                             '--together=2', f'--process_index={i}', '--process_count=2')
              for i in range(2)]
  groups = ('seed0, seed1', 'seed2, seed3')
  first, second = _started(commands[0], env), _started(commands[1], env)

  def ready(line: str) -> bool:  # the second's group saved, the other group held by the first
    group = line.split(':')[0]
    other = next(g for g in groups if g != group).split(', ')
    return (any(checkpointing.saved_steps(f'{workdir}/{row}') for row in group.split(', '))
            and workdirs.held_by(f'{workdir}/claims/{other[0]}.lock').get('pid') == first.pid)

  out, line = _kill_when(second, tuple(f'{g}: training in' for g in groups), ready)
  taken = line.split(':')[0]  # the group the second held when it was killed
  stopped = max(max(checkpointing.saved_steps(f'{workdir}/{row}'), default=0)
                for row in taken.split(', '))
  assert 0 < stopped < 20, stopped  # killed mid-group, after a checkpoint
  out_first, _ = _kill_when(first, (f'{taken}: training in',))
  assert 'Traceback' not in out_first, out_first[-3000:]
  results = epath.Path(workdir, 'rows')
  assert len(list(results.iterdir())) == 2  # the first's own group
  table = epath.Path(workdir, 'table3_tiny.md')
  assert not table.exists()

  alone = subprocess.run(commands[1], cwd=REPO, env=env, capture_output=True, text=True)
  assert alone.returncode == 0, alone.stdout[-3000:] + alone.stderr[-3000:]
  assert sum(' done already' in line for line in alone.stdout.splitlines()) == 2
  assert sorted(path.name for path in results.iterdir()) == [f'{row}.json' for row in ROWS]
  written = table.stat().mtime
  again = subprocess.run(commands[0], cwd=REPO, env=env, capture_output=True, text=True)
  assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
  assert again.stdout.count('done already') == 4
  assert table.stat().mtime == written  # written once
  with epath.Path(workdir, 'table3_tiny.csv').open() as f:
    assert [r['row'] for r in csv.DictReader(f)] == list(ROWS)

  for row in ROWS:
    shared = json.loads((results / f'{row}.json').read_text())
    with open(two_devices_each['workdir'] / 'rows' / f'{row}.json') as g:
      uninterrupted = json.load(g)
    for key in ('perplexity', 'bleu_tokenized', 'dev_curve', 'checkpoint_steps', 'together'):
      assert shared[key] == uninterrupted[key], (row, key)
    with open(uninterrupted['hypotheses']) as g:
      assert epath.Path(shared['hypotheses']).read_text() == g.read(), row
    jax.tree.map(np.testing.assert_array_equal, _params(f'{workdir}/{row}'),
                 _params(two_devices_each['workdir'] / row))


@pytest.mark.slow
def test_groups_side_by_side_stopped_by_ctrl_c_or_killed_resume_to_their_figures(
    one_device_each, tmp_path):
  """`one_device_each`'s four groups, one a device, in a process stopped by Ctrl-C (SIGINT,
  which takes SIGTERM's path) once the fourth has started (every group in flight saved, each
  saying why, the sweep's error saying to run it again), then killed (SIGKILL) at a random moment after a group has started again, then run
  again here: every row's dev curve, figures, hypotheses and final parameters equal
  `one_device_each`'s."""
  rows, workdir = list(ROWS), tmp_path / 'run'
  command = [*_sweep_command(one_device_each['sweep'], workdir, f'--rows={",".join(rows)}'),
             '--devices_per_group=1']
  out, status = signalled(command, (f'{rows[-1]}: training in',), signal.SIGINT)
  assert status != 0 and 'run the sweep again' in out and 'Traceback' not in out, out[-3000:]
  assert 'Interrupted (Ctrl-C): saved step' in out, out[-3000:]
  for row in rows:  # finished, or saved where Ctrl-C found it
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
