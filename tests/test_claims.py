"""Who trains which group (transformer_jax/sweep/claims.py): a group another process (or slot)
holds is never trained, and is taken as soon as its holder lets go or ends; no slot claims
ahead a group another slot starts with; a shared sweep's processes agree on what they run, or
the one that differs stops naming the difference; a group that fails stops the others, which
say why."""

import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from etils import epath
import pytest

from conftest import REPO
from test_sweep import _fake_rows, _sweep_file
from transformer_jax.storage import workdirs
from transformer_jax.sweep import ahead as sweep_ahead, claims, group as sweep_group
from transformer_jax.sweep import run as sweep_run
from transformer_jax.sweep.slots import SweepProcess
from transformer_jax.training import preemption


@pytest.fixture(params=['local', 'bucket'])
def root(request, tmp_path) -> str:
  """Where a sweep keeps its workdir: a local directory, or a bucket of the emulator, which
  this test reaches (claims are then leases, `leases`)."""
  if request.param == 'local':
    return str(tmp_path)
  emulator = request.getfixturevalue('in_emulator')
  return f'gs://{emulator.bucket()}/sweep'


def test_a_claim_is_held_until_released_and_by_one_holder_at_a_time(root):
  first = claims.Claim.take(root, ['a', 'b'])
  assert first is not None
  assert claims.Claim.take(root, ['a', 'b']) is None  # another slot of this process
  assert claims.holder(root, ['a', 'b']) == f'{socket.gethostname()}:{os.getpid()}'
  if not root.startswith('gs://'):
    assert json.loads(epath.Path(root, 'claims', 'a.lock').read_text())['group'] == ['a', 'b']
  first.release()
  with claims.Claim.take(root, ['a', 'b']) as again:
    assert again is not None


def test_a_claim_dies_with_its_process(root, gcs_emulator):
  # A process that takes the claim and is killed (SIGKILL) leaves it free at once.
  child = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time; from transformer_jax.sweep import claims; '
       f'assert claims.Claim.take({root!r}, ["a"]); print("held", flush=True); '
       'time.sleep(60)'], cwd=REPO, stdout=subprocess.PIPE, text=True,
      env=gcs_emulator.environment())
  assert child.stdout.readline().strip() == 'held'
  assert claims.Claim.take(root, ['a']) is None
  child.kill()
  assert child.wait() == -signal.SIGKILL
  assert claims.Claim.take(root, ['a']) is not None


def test_a_group_held_elsewhere_is_waited_for_and_taken_when_let_go(
    root, tmp_path, monkeypatch):
  ran = _fake_rows(tmp_path, monkeypatch)
  monkeypatch.setattr('transformer_jax.sweep.slots.CLAIM_POLL_SECONDS', 0.05)
  workdir = os.path.join(root, 'run')
  results = os.path.join(root, 'results')
  epath.Path(workdir).mkdir(parents=True, exist_ok=True)
  held = claims.Claim.take(workdir, ['small'])
  sweep = threading.Thread(target=sweep_run.run, args=(
      _sweep_file(tmp_path), workdir, ['small', 'wide'], results))
  sweep.start()
  deadline = time.monotonic() + 30
  while ran != ['wide'] and time.monotonic() < deadline:
    time.sleep(0.02)
  time.sleep(0.3)
  assert ran == ['wide']  # 'small' is held: not trained, waited for
  held.release()  # its holder ends without finishing it
  sweep.join(timeout=30)
  assert ran == ['wide', 'small']
  assert sorted(path.name for path in epath.Path(results).iterdir()) == ['small.json',
                                                                          'wide.json']


def test_a_group_finished_by_its_holder_is_not_trained_again(tmp_path, monkeypatch):
  ran = _fake_rows(tmp_path, monkeypatch)
  monkeypatch.setattr('transformer_jax.sweep.slots.CLAIM_POLL_SECONDS', 0.05)
  workdir, results = tmp_path / 'run', tmp_path / 'results'
  os.makedirs(results)
  held = claims.Claim.take(str(workdir), ['small'])
  sweep = threading.Thread(target=sweep_run.run, args=(
      _sweep_file(tmp_path), str(workdir), ['small', 'wide'], str(results)))
  sweep.start()
  time.sleep(0.5)
  (results / 'small.json').write_text(json.dumps({'row': 'small', 'perplexity': 5.0}))
  held.release()
  sweep.join(timeout=30)
  assert ran == ['wide']


def _shared(tmp_path, index: int, count: int, rows=('small', 'wide'), together: int = 1):
  sweep_run.run(_sweep_file(tmp_path), str(tmp_path / 'run'), list(rows),
                str(tmp_path / 'results'), together=together,
                process=SweepProcess(index, count))


def test_a_process_that_differs_from_the_shared_sweep_is_refused_naming_it(tmp_path,
                                                                           monkeypatch):
  ran = _fake_rows(tmp_path, monkeypatch)
  _shared(tmp_path, 0, 2)
  record = json.loads((tmp_path / 'run' / claims.RECORD_FILENAME).read_text())
  assert record['process_count'] == 2 and record['groups'] == [['small'], ['wide']]
  assert sorted(ran) == ['small', 'wide']  # one process alone trains every group
  os.remove(tmp_path / 'results' / 'wide.json')  # to run again: the sweep has not ended
  with pytest.raises(ValueError, match=r'--process_count: 3 here, 2 in the sweep'):
    _shared(tmp_path, 1, 3)
  with pytest.raises(ValueError, match=r'the rows \(--rows\): small here, small, wide in the '):
    _shared(tmp_path, 1, 2, rows=('small',))
  with pytest.raises(ValueError, match=r'--together: 2 here, 1 in the sweep'):
    _shared(tmp_path, 1, 2, together=2)
  with pytest.raises(ValueError, match=r'--process_count: 1 here, 2 in the sweep'):
    _shared(tmp_path, 0, 1)  # alone, on a shared sweep's workdir
  _shared(tmp_path, 1, 2)  # as started: the row left trained again
  assert sorted(ran) == ['small', 'wide', 'wide']
  _shared(tmp_path, 0, 1)  # that sweep has ended: a new one may start in its workdir


def _record(tmp_path, **changes) -> dict:
  sweep = tmp_path / 'sweep.py'
  sweep.write_text(changes.pop('text', 'ROWS = ["a", "b"]\n'))
  mine = claims.sweep_record(str(sweep), ['a', 'b'], 1, [], 1, [['a'], ['b']], 2, 'cpu', 8)
  return {**mine, **changes}


@pytest.mark.parametrize('changes, named', [
    ({'process_count': 3}, '--process_count: 3 here, 2 in the sweep'),
    ({'text': 'ROWS = ["a", "b"]  # changed\n'}, 'the sweep file\'s text'),
    ({'rows': ['a']}, r'the rows \(--rows\): a here, a, b in the sweep'),
    ({'together': 2}, '--together: 2 here, 1 in the sweep'),
    ({'overrides': ['dtype=bfloat16']}, r"--override: \['dtype=bfloat16'\] here, \[\] in"),
    ({'devices_per_group': 2}, '--devices_per_group: 2 here, 1 in the sweep'),
    ({'device_kind': 'NVIDIA H200'}, "the device kind: 'NVIDIA H200' here, 'cpu' in"),
    ({'devices': 4}, 'the devices a process has: 4 here, 8 in the sweep'),
])
def test_each_difference_from_the_recorded_sweep_is_named(tmp_path, changes, named):
  claims.record(str(tmp_path), _record(tmp_path), finished=set())
  assert claims.record(str(tmp_path), _record(tmp_path), set())['groups'] == [['a'], ['b']]
  with pytest.raises(ValueError, match=named):
    claims.record(str(tmp_path), _record(tmp_path, **changes), set())
  # Once every row of the recorded sweep is finished, a new one is recorded in its place.
  assert claims.record(str(tmp_path), _record(tmp_path, **changes), {'a', 'b'}) == _record(
      tmp_path, **changes)


def test_a_failed_group_stops_the_others_which_say_why(tmp_path, monkeypatch):
  # Two slots (one device each): 'small' fails while 'wide' trains; 'wide' is told to stop
  # (saved), and why; the sweep raises the failure itself, not a preemption.
  _fake_rows(tmp_path, monkeypatch)
  monkeypatch.setattr(sweep_group, 'run_group', _failing_or_waiting)
  with pytest.raises(RuntimeError, match='small failed'):
    sweep_run.run(_sweep_file(tmp_path), str(tmp_path / 'run'), ['small', 'wide'],
                  str(tmp_path / 'results'), devices_per_group=4)
  assert _REASONS == ['Stopped: small failed (RuntimeError: small failed)']


_REASONS = []


def _failing_or_waiting(group, configs, workdir, overrides, device_kind, data_cache, compiled,
                        devices, notice):
  if group == ['small']:
    time.sleep(0.2)
    raise RuntimeError('small failed')
  deadline = time.monotonic() + 30
  while not notice.received and time.monotonic() < deadline:
    time.sleep(0.01)
  _REASONS.append(notice.reason)
  raise sweep_group.Preempted('wide stopped at step 3 of 20')


def test_a_workdir_that_cannot_be_reached_is_refused_before_anything_is_created(
    tmp_path, monkeypatch, in_emulator):
  sweep = _sweep_file(tmp_path)
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError, match=r'--workdir=s3://bucket/run: a s3:// URL.*Mount it'):
    sweep_run.run(sweep, 's3://bucket/run')
  with pytest.raises(ValueError, match=r'--workdir=gs://missing/run: the bucket gs://missing '
                                       r'does not exist'):
    sweep_run.run(sweep, 'gs://missing/run')
  with pytest.raises(ValueError, match=r'--results=gs://missing/rows: the bucket'):
    sweep_run.run(sweep, 'run', results_dir='gs://missing/rows')
  assert sorted(os.listdir(tmp_path)) == ['table3_tiny']  # the sweep file: no gs:, no run


def test_a_file_system_without_flock_is_named(tmp_path, monkeypatch):
  def no_flock(descriptor, operation):
    raise OSError(errno.ENOLCK, 'No locks available')

  monkeypatch.setattr(fcntl, 'flock', no_flock)
  os.makedirs(tmp_path / 'run')
  with pytest.raises(OSError, match=r'run/lock: its file system does not support flock \(No '
                                    r'locks available\).*Lustre mounted with -o flock'):
    with workdirs.lock(str(tmp_path / 'run')):
      pass
  with pytest.raises(OSError, match=r'claims/a.lock: its file system does not support flock'):
    claims.Claim.take(str(tmp_path / 'run'), ['a'])


def test_ctrl_c_asks_to_save_and_stop_and_a_second_one_interrupts():
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own
  try:
    _ctrl_c_twice()
  finally:
    signal.signal(signal.SIGINT, previous)
  notice = preemption.Notice()
  notice.stop('Stopped: a failed')
  notice.stop('Stopped: b failed')
  assert notice.received and notice.reason == 'Stopped: a failed'  # the first reason


def _ctrl_c_twice():
  with preemption.Notice() as notice:
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 5
    while not notice.received and time.monotonic() < deadline:
      time.sleep(0.01)
    assert notice.reached(7) and notice.reason == 'Interrupted (Ctrl-C)'
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(1)


def test_each_group_compiles_ahead_on_the_devices_it_trains_on(tmp_path, monkeypatch):
  # Two slots of 4 devices, six groups: each slot claims its next group while one trains and
  # compiles it for its own devices, the ones that group then trains on.
  trained, compiled = {}, {}
  _fake_rows(tmp_path, monkeypatch)
  fake = sweep_group.run_group
  start = sweep_ahead.Ahead.start

  def spied_start(ahead, group, configs, dirs, devices=None):
    compiled.setdefault(tuple(group), [d.id for d in devices])
    return start(ahead, group, configs, dirs, devices)

  def spied_group(group, *args):
    trained[tuple(group)] = [d.id for d in args[6]]
    time.sleep(0.05)
    return fake(group, *args)

  monkeypatch.setattr(sweep_ahead.Ahead, 'start', spied_start)
  monkeypatch.setattr(sweep_group, 'run_group', spied_group)
  rows = {f'seed{i}': {'seed': i} for i in range(6)}
  sweep_run.run(_sweep_file(tmp_path, rows), str(tmp_path / 'run'), list(rows),
                str(tmp_path / 'results'), devices_per_group=4)
  assert sorted(trained) == [(row,) for row in rows]
  assert compiled == trained
  assert {tuple(ids) for ids in trained.values()} == {(0, 1, 2, 3), (4, 5, 6, 7)}


def test_no_slot_claims_ahead_a_group_another_slot_starts_with(tmp_path, monkeypatch):
  """A slot claims and compiles its next group while one trains, but never a group the plan
  starts another slot with: a process of a shared sweep started after the others finds its
  first group free, not held ahead by a process that started sooner. Alone, a process with one
  slot compiles its second group while its first trains; the first of two processes, its
  partner never started, compiles and trains the partner's group only once its own is done."""
  _fake_rows(tmp_path, monkeypatch)
  events = []
  start, fake = sweep_ahead.Ahead.start, sweep_group.run_group

  def spied_start(ahead, group, *args):
    if ('compiled', *group) not in events:
      events.append(('compiled', *group))
    return start(ahead, group, *args)

  def spied_group(group, *args):
    events.append(('trained', *group))
    return fake(group, *args)

  monkeypatch.setattr(sweep_ahead.Ahead, 'start', spied_start)
  monkeypatch.setattr(sweep_group, 'run_group', spied_group)
  sweep_run.run(_sweep_file(tmp_path), str(tmp_path / 'alone'), ['small', 'wide'],
                str(tmp_path / 'alone_results'))
  assert events == [('compiled', 'small'), ('compiled', 'wide'), ('trained', 'small'),
                    ('trained', 'wide')]
  events.clear()
  _shared(tmp_path, 0, 2)
  assert events == [('compiled', 'small'), ('trained', 'small'), ('compiled', 'wide'),
                    ('trained', 'wide')]
