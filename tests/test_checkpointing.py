"""checkpointing.Checkpoints on a small state: orbax's skipped saves are errors, and a restore
that fails for want of memory is raised, not taken for a damaged checkpoint."""

import os

import jax
import numpy as np
import pytest

from transformer_jax import atomic, checkpointing


def _state(value: float) -> dict:
  return {'params': {'w': np.full((3, 2), value, np.float32)}, 'step': np.int32(value)}


def _saved(tmp_path, steps) -> checkpointing.Checkpoints:
  checkpoints = checkpointing.Checkpoints(str(tmp_path), keep=5)
  for step in steps:
    checkpoints.save(step, _state(step), {'position': step})
  checkpoints.wait()
  return checkpoints


def test_the_newest_checkpoint_is_restored(tmp_path):
  step, state, data_state = _saved(tmp_path, [2, 4]).restore_latest(None)
  assert step == 4 and data_state == {'position': 4}
  np.testing.assert_array_equal(state['params']['w'], np.full((3, 2), 4.0))


def test_a_step_not_newer_than_the_saved_ones_is_an_error(tmp_path):
  checkpoints = _saved(tmp_path, [4])
  with pytest.raises(RuntimeError, match=r'step 3 was not saved in .*checkpoints: it already '
                                         r'holds step 4'):
    checkpoints.save(3, _state(3), {'position': 3})


@pytest.mark.parametrize('error', [MemoryError('host'),
                                   jax.errors.JaxRuntimeError('RESOURCE_EXHAUSTED: device')])
def test_running_out_of_memory_while_restoring_moves_nothing_aside(tmp_path, monkeypatch, error):
  checkpoints = _saved(tmp_path, [2, 4])

  def restore(step, abstract_state=None):
    raise error

  monkeypatch.setattr(checkpoints, 'restore', restore)
  with pytest.raises(type(error)):
    checkpoints.restore_latest(None)
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2', '4']


def test_a_copy_is_whole_and_leaves_no_temporary(tmp_path):
  source = tmp_path / 'spm.model'
  source.write_bytes(bytes(range(256)) * 64)
  (tmp_path / 'out').mkdir()
  atomic.copy(str(source), str(tmp_path / 'out' / 'spm.model'))
  assert (tmp_path / 'out' / 'spm.model').read_bytes() == source.read_bytes()
  assert os.listdir(tmp_path / 'out') == ['spm.model']
