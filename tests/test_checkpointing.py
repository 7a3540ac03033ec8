"""checkpointing.Checkpoints on a small state: a checkpoint written off the schedule is not
kept once a newer one is, orbax's skipped saves are errors, a restore
that fails for want of memory is raised, not taken for a damaged checkpoint, and processes
that disagree about a checkpoint all skip it, and runs saving at once from threads all finish."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

from conftest import REPO
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.storage import atomic
from transformer_jax.training import checkpointing


def _state(step: int) -> dict:
  """A state whose values differ by position and step, so a mixed-up restore shows."""
  w = np.random.default_rng(step).standard_normal((3, 2)).astype(np.float32)
  return {'params': {'w': w}, 'step': np.int32(step)}


def _saved(tmp_path, steps) -> checkpointing.Checkpoints:
  checkpoints = checkpointing.Checkpoints(str(tmp_path), keep=5)
  for step in steps:
    checkpoints.save(step, _state(step), {'position': step})
  checkpoints.wait()
  return checkpoints


def test_the_newest_checkpoint_is_restored(tmp_path):
  step, state, data_state = _saved(tmp_path, [2, 4]).restore_latest(None)
  assert step == 4 and data_state == {'position': 4}
  np.testing.assert_array_equal(state['params']['w'], _state(4)['params']['w'])


def _state_of(step: int) -> dict:
  """`_state` with Adam's two moments beside the parameters, as a train state holds them."""
  state = _state(step)
  moments = {'mu': state['params']['w'] * 2, 'nu': state['params']['w'] ** 2}
  return {**state, 'opt_state': moments}


def _abstract_params() -> dict:
  one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return {'w': jax.ShapeDtypeStruct((3, 2), np.float32, sharding=one_device)}


def test_only_the_checkpoints_a_resume_needs_keep_the_optimizer_state(tmp_path):
  """Every 2 steps, the last 3 kept for the average: of 2..10, 6, 8 and 10 are kept; 10 (the
  newest) and 8 (the newest scheduled before it, the fallback) whole, 6 with its parameters
  only."""
  checkpoints = checkpointing.Checkpoints(str(tmp_path), keep=3, every=2)
  for step in range(2, 11, 2):
    checkpoints.save(step, _state_of(step), {'position': step})
  checkpoints.wait()
  assert checkpoints.all_steps() == [6, 8, 10] and checkpoints.full_steps() == [8, 10]
  items = {step: set(os.listdir(tmp_path / 'checkpoints' / str(step))) for step in (6, 8, 10)}
  assert 'params' in items[6] and not {'optimizer', 'optimizer.deleted'} & items[6]
  assert {'params', 'optimizer'} <= items[8] and {'params', 'optimizer'} <= items[10]
  step, state, data_state = checkpoints.restore_latest(None)
  assert step == 10 and data_state == {'position': 10}
  for name in ('mu', 'nu'):
    np.testing.assert_array_equal(state['opt_state'][name], _state_of(10)['opt_state'][name])
  # A damaged newest falls back to 8, whole.
  for path in (tmp_path / 'checkpoints' / '10' / 'optimizer').rglob('*'):
    if path.is_file():
      path.write_bytes(b'')
  step, state, _ = checkpoints.restore_latest(None)
  assert step == 8
  np.testing.assert_array_equal(state['opt_state']['nu'], _state_of(8)['opt_state']['nu'])


def test_the_average_of_thinned_checkpoints_is_that_of_whole_ones_bit_for_bit(tmp_path):
  """The same states saved as this module thins them and as whole train states in one orbax
  item (the layout before the split, written here by orbax itself): §6.1's average of the last
  3, and each step's parameters, are the same bits; both layouts resume."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  steps = range(2, 11, 2)
  thinned = checkpointing.Checkpoints(str(tmp_path / 'thinned'), keep=3, every=2)
  with ocp.CheckpointManager(tmp_path / 'whole' / 'checkpoints',
                             item_names=('state', 'data')) as whole:
    for step in steps:
      thinned.save(step, _state_of(step), {'position': step})
      whole.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(_state_of(step)),
                                               data=ocp.args.JsonSave({'position': step})))
  thinned.wait()
  old = checkpointing.Checkpoints(str(tmp_path / 'whole'))
  average, averaged = thinned.average_last(3, _abstract_params())
  reference, reference_steps = old.average_last(3, _abstract_params())
  assert averaged == reference_steps == [6, 8, 10]
  assert np.asarray(average['w']).tobytes() == np.asarray(reference['w']).tobytes()
  assert np.asarray(thinned.restore_params(6, _abstract_params())['w']).tobytes() == (
      _state(6)['params']['w'].tobytes())
  assert old.restore_latest(None)[0] == 10 and old.full_steps() == list(steps)


def test_checkpoints_of_parameters_only_are_read_but_not_resumed(tmp_path):
  checkpoints = checkpointing.Checkpoints(str(tmp_path), keep=1)
  checkpoints.save(4, _state_of(4), None)
  checkpoints.wait()
  np.testing.assert_array_equal(checkpoints.restore_params(4, _abstract_params())['w'],
                                _state(4)['params']['w'])
  with pytest.raises(RuntimeError, match='hold only parameters'):
    checkpoints.restore_latest(None)


def test_a_step_not_newer_than_the_saved_ones_is_an_error(tmp_path):
  checkpoints = _saved(tmp_path, [4])
  with pytest.raises(RuntimeError, match=r'step 3 was not saved in .*checkpoints: it already '
                                         r'holds step 4'):
    checkpoints.save(3, _state(3), {'position': 3})


def test_a_checkpoint_off_the_schedule_is_kept_only_until_a_newer_one_is_saved(tmp_path):
  # Every 200 steps, the last 2 kept; 450 is what a preemption writes.
  checkpoints = checkpointing.Checkpoints(str(tmp_path), keep=2, every=200)
  kept = []
  for step in (200, 400, 450, 600, 800):
    checkpoints.save(step, _state(step), {'position': step})
    checkpoints.wait()
    kept.append(checkpoints.all_steps())
  # 450, the newest, is kept whole (with 400, the step a damaged 450 falls back to) while it
  # is the newest: the last 2 that an average of 2 would read.
  assert kept == [[200], [200, 400], [400, 450], [400, 600], [600, 800]]
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['600', '800']
  # So §6.1's average of the last two is of the scheduled 600 and 800, as if never preempted.
  average, steps = checkpoints.average_last(2, _abstract_params())
  assert steps == [600, 800]
  np.testing.assert_allclose(average['w'], (_state(600)['params']['w'].astype(np.float64)
                                            + _state(800)['params']['w']) / 2, rtol=1e-6)


@pytest.mark.parametrize('error', [MemoryError('host'),
                                   jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: device')])
def test_running_out_of_memory_while_restoring_moves_nothing_aside(tmp_path, monkeypatch, error):
  checkpoints = _saved(tmp_path, [2, 4])

  def restore(step, abstract_state=None):
    raise error

  monkeypatch.setattr(checkpoints, 'restore', restore)
  monkeypatch.setattr(checkpoints, 'restore_params', restore)
  with pytest.raises(type(error)):
    checkpoints.restore_latest(None)
  with pytest.raises(type(error)):  # not skipped as unreadable either
    checkpoints.average_last(2, None)
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2', '4']


def test_a_copy_is_whole_and_leaves_no_temporary(tmp_path):
  source = tmp_path / 'spm.model'
  source.write_bytes(bytes(range(256)) * 64)
  (tmp_path / 'out').mkdir()
  atomic.copy(str(source), str(tmp_path / 'out' / 'spm.model'))
  assert (tmp_path / 'out' / 'spm.model').read_bytes() == source.read_bytes()
  assert os.listdir(tmp_path / 'out') == ['spm.model']


_TWO_PROCESS_RESTORE = '''
import json, os, sys
os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'
import jax, numpy as np
process, port, workdir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jax.config.update('jax_cpu_collectives_implementation', 'gloo')
jax.distributed.initialize(f'127.0.0.1:{port}', num_processes=2, process_id=process)
from transformer_jax.training import checkpointing
replicated = jax.sharding.NamedSharding(jax.sharding.Mesh(jax.devices(), ('data',)),
                                        jax.sharding.PartitionSpec())
abstract = {'params': {'w': jax.ShapeDtypeStruct((3, 2), np.float32, sharding=replicated)},
            'step': jax.ShapeDtypeStruct((), np.int32, sharding=replicated)}
checkpoints = checkpointing.Checkpoints(workdir, keep=5)

def failing_on_process_1(read):
  def read_or_fail(step, abstract_tree):
    restored = read(step, abstract_tree)  # every process takes part in orbax's read
    if process == 1 and step == 4:
      raise ValueError('a damaged shard')
    return restored
  return read_or_fail

checkpoints.restore = failing_on_process_1(checkpoints.restore)
checkpoints.restore_params = failing_on_process_1(checkpoints.restore_params)
average, steps = checkpoints.average_last(2, abstract['params'])  # moves nothing aside
step, state, data_state = checkpoints.restore_latest(abstract)
print(json.dumps({'step': step, 'w': float(state['params']['w'].addressable_data(0)[0, 0]),
                  'position': data_state['position'], 'averaged': steps,
                  'average': float(average['w'].addressable_data(0)[0, 0])}))
'''


@pytest.mark.slow
def test_a_checkpoint_one_process_cannot_read_is_skipped_by_every_process(tmp_path):
  _saved(tmp_path, [2, 4]).close()
  script = tmp_path / 'restore.py'
  script.write_text(_TWO_PROCESS_RESTORE)
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
  processes = [subprocess.Popen([sys.executable, str(script), str(i), str(port), str(tmp_path)],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for i in range(2)]
  try:
    results = [process.communicate(timeout=300) for process in processes]
  finally:
    for process in processes:
      process.kill()
  for process, (_, stderr) in zip(processes, results):
    assert process.returncode == 0, stderr[-3000:]
  w = float(_state(2)['params']['w'][0, 0])
  expected = {'step': 2, 'w': w, 'position': 2, 'averaged': [2], 'average': w}
  assert [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in results] == [expected] * 2
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2', '4.corrupt']


def test_runs_saving_at_once_in_threads_all_finish(tmp_path):
  """Four runs' checkpoints saved at the same moments from four threads (a sweep's groups side
  by side), ten steps each: every save completes and restores. Orbax names a save's signals
  after a process-wide counter; saves started at once took each other's numbers and two of the
  four threads waited forever before `checkpointing` started them one at a time."""
  state = {'params': {'a': jnp.arange(1000.0)}, 'b': jnp.ones((30, 30))}
  start = threading.Barrier(4)
  errors = []

  def run(i):
    try:
      with contextlib.closing(checkpointing.Checkpoints(tmp_path / str(i), keep=2)) as saved:
        for step in range(1, 11):
          start.wait(timeout=30)
          saved.save(step, {'params': {'a': state['params']['a'] + i}, 'b': state['b']},
                     {'position': step})
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(4)]
  for thread in threads:
    thread.start()
  deadline = time.monotonic() + 60
  for thread in threads:
    thread.join(max(0.0, deadline - time.monotonic()))
  assert not any(thread.is_alive() for thread in threads), 'a save never finished'
  assert not errors, errors
  for i in range(4):
    with contextlib.closing(checkpointing.Checkpoints(tmp_path / str(i))) as saved:
      assert saved.all_steps() == [9, 10]
      restored, position = saved.restore(10)
      np.testing.assert_array_equal(restored['params']['a'], np.arange(1000.0) + i)
      assert position == {'position': 10}


def test_a_run_waiting_for_its_previous_save_holds_no_other_runs_save(tmp_path):
  """A save waits for its run's previous save to finish, outside the lock under which saves
  start: while one run's earlier save is slow (its wait held for 2 s here), another run's save
  goes through at once."""
  slow = checkpointing.Checkpoints(str(tmp_path / 'slow'), keep=2)
  fast = checkpointing.Checkpoints(str(tmp_path / 'fast'), keep=2)
  waiting = threading.Event()
  wait_until_finished = slow._manager.wait_until_finished  # pylint: disable=protected-access

  def slow_wait():
    waiting.set()
    time.sleep(2.0)
    wait_until_finished()

  slow._manager.wait_until_finished = slow_wait  # pylint: disable=protected-access
  saving = threading.Thread(target=slow.save, args=(1, _state(1), {'position': 1}))
  saving.start()
  assert waiting.wait(timeout=30)
  start = time.monotonic()
  fast.save(1, _state(1), {'position': 1})
  fast.wait()
  assert time.monotonic() - start < 1.5  # not behind the slow run's 2 s
  saving.join(timeout=30)
  slow.close()
  fast.close()
  assert slow.all_steps() == [1] and fast.all_steps() == [1]
