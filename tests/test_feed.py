"""The training feed (`transformer_jax.training.feed`): calls of K steps aligned to multiples of K,
the iterator's batches stacked and placed on the devices in a background thread, the position of the
batches taken (not of those made ahead), errors raised in the training loop, no thread left
behind."""

import threading
import time

import jax
import numpy as np
import pytest

from conftest import train_config
from transformer_jax.data import batching
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.training import feed


def _batcher() -> batching.Batcher:
  """Random pairs packed into sequences of one length, 8 sequences a batch."""
  rng = np.random.default_rng(0)
  sides = [[rng.integers(1, 64, rng.integers(1, 12)).astype(np.int32) for _ in range(300)]
           for _ in range(2)]
  split = batching.TokenizedSplit.from_pairs(*sides, max_length=16)
  return batching.Batcher(split, max_length=16, tokens_per_batch=128, sequences_multiple=2,
                          pack_length=16)


@pytest.fixture(scope='module')
def model() -> ShardedModel:
  config = train_config(**{'parallel.data': 2})
  return ShardedModel(config, sharding.make_mesh(config, jax.devices()[:2]))


def _threads() -> list[str]:
  """The feed's and the planner's threads still alive."""
  return [t.name for t in threading.enumerate()
          if t.name.startswith(('grain-thread-prefetch', 'transformer_jax'))]


@pytest.mark.parametrize('ahead', [0, 3])
def test_calls_stack_the_iterators_batches_and_end_at_multiples_of_k(model, ahead):
  # Resumed at step 6 of a 13-step run with K = 4: steps 7 and 8 alone, 9-12 in one call,
  # then 13 alone (fewer than K left). Each call holds the next batches of an iterator
  # restored to the same position, placed with the sequences over the batch axis.
  batcher = _batcher()
  reference = batching.TrainIterator(batcher, seed=1)
  for _ in range(6):
    next(reference)
  iterator = batching.TrainIterator(batcher, seed=1)
  iterator.set_state(reference.get_state())
  with feed.Feed(iterator, model, steps_per_call=4, start=6, end=13, ahead=ahead) as calls:
    taken = list(calls)
  assert [list(call.steps) for call in taken] == [[7], [8], [9, 10, 11, 12], [13]]
  assert [call.shape for call in taken] == ['8 x 16 (packed)'] * 2 + [
      '4 x 8 x 16 (packed)', '8 x 16 (packed)']
  for call in taken:
    want = [next(reference) for _ in call.steps]
    for name, value in call.batch.items():
      got = np.asarray(value)
      if len(call.steps) == 1:
        np.testing.assert_array_equal(got, want[0][name])
        assert value.sharding == model.batch_sharding
      else:
        np.testing.assert_array_equal(got, np.stack([batch[name] for batch in want]))
        assert value.sharding == model.stacked_batch_sharding
  reference.close()


def test_the_position_is_that_of_the_batches_taken(model):
  # Three calls ahead, the thread has read further than the loop has taken; the position
  # saved after each call restores an iterator to just after that call's batches.
  batcher = _batcher()
  iterator = batching.TrainIterator(batcher, seed=2)
  with feed.Feed(iterator, model, steps_per_call=2, start=0, end=40, ahead=3) as calls:
    for _ in range(5):
      call = next(calls)
      position = calls.get_state()
      restored = batching.TrainIterator(batcher, seed=2)
      restored.set_state(position)
      reference = batching.TrainIterator(batcher, seed=2)
      for _ in range(call.steps[-1]):
        next(reference)
      np.testing.assert_array_equal(next(restored)['inputs'], next(reference)['inputs'])
      restored.close()
      reference.close()
    # The thread reads ahead of the batches taken (given a moment to fill its buffer).
    ahead = lambda state: (state['epoch'], state['index']) > (position['epoch'],
                                                              position['index'])
    deadline = time.time() + 10
    while not ahead(iterator.get_state()) and time.time() < deadline:
      time.sleep(0.01)
    assert ahead(iterator.get_state())
  assert not _threads()


def test_an_error_in_the_thread_is_raised_in_the_loop_and_no_thread_is_left(model):
  class Failing(batching.TrainIterator):
    def __next__(self):
      if self.get_state()['index'] == 5:
        raise OSError('disk gone')
      return super().__next__()

  iterator = Failing(_batcher(), seed=0)
  with pytest.raises(OSError, match='disk gone') as raised:
    with feed.Feed(iterator, model, steps_per_call=2, start=0, end=20, ahead=2) as calls:
      for _ in calls:
        pass
  assert 'training batches of step 5' in ''.join(raised.value.__notes__)
  assert not _threads()


def test_closing_mid_run_stops_the_thread(model):
  iterator = batching.TrainIterator(_batcher(), seed=0)
  calls = feed.Feed(iterator, model, steps_per_call=1, start=0, end=10**6, ahead=4)
  next(calls)
  assert _threads()
  calls.close()
  assert not _threads()
