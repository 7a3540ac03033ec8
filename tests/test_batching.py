"""Length-bucketed, token-based batches and their checkpointable iterator, which plans the next
epoch in a background thread."""

import json
import threading
import time

import numpy as np
import pytest

from transformer_jax.data import batching
from transformer_jax.data.batching import (PLANNER_THREAD, Batcher, PlanCancelled, Sequences,
                                           TokenizedSplit, TrainIterator, bucket_lengths,
                                           eval_batches, padding_fraction)


def _split(n=500, max_len=70, seed=0, max_length=64):
  rng = np.random.default_rng(seed)
  sources = [rng.integers(3, 100, size=rng.integers(1, max_len)).astype(np.int32)
             for _ in range(n)]
  targets = [rng.integers(3, 100, size=rng.integers(1, max_len)).astype(np.int32)
             for _ in range(n)]
  # Tag each pair: the first token of source and target is its index + 1000.
  for i in range(n):
    sources[i][0] = targets[i][0] = 1000 + i
  return TokenizedSplit.from_pairs(sources, targets, max_length)


def _all_ids(split):
  return sorted(int(source[0]) - 1000 for source in split.sources)


def _pair_ids(batch):
  """The pairs of a batch, packed or not, by their tags, sequence after sequence."""
  ids = batch['inputs'].ravel()
  return (ids[ids >= 1000] - 1000).tolist()


def test_bucket_lengths_are_bounded_and_end_at_max_length():
  assert bucket_lengths(64) == [8, 16, 24, 32, 40, 48, 56, 64]
  lengths = bucket_lengths(256)
  assert lengths[-1] == 256 and lengths == sorted(set(lengths)) and len(lengths) <= 16


@pytest.mark.parametrize('max_length', [8, 20, 64, 100, 128, 256, 512])
def test_coarse_buckets_are_at_most_three_and_end_at_max_length(max_length):
  lengths = bucket_lengths(max_length, 'coarse')
  assert lengths[-1] == max_length and lengths == sorted(set(lengths)) and len(lengths) <= 3
  assert all(length % 8 == 0 for length in lengths[:-1])
  # Each halves the next at most (rounded up to a multiple of 8).
  assert all(shorter >= longer // 2 for shorter, longer in zip(lengths, lengths[1:]))


def test_long_pairs_are_dropped_and_counted():
  split = _split(max_len=100, max_length=64)
  assert split.num_dropped > 0
  assert len(split) + split.num_dropped == 500
  assert all(len(s) <= 64 and len(t) <= 64 for s, t in zip(split.sources, split.targets))


def test_batches_respect_tokens_per_batch_and_bucket_shapes():
  split = _split()
  batcher = Batcher(split, max_length=64, tokens_per_batch=300, sequences_multiple=2)
  shapes = set()
  seen = []
  for length, indices in batcher.plan(seed=3):
    batch = batcher.assemble(length, indices)
    sequences, width = batch['inputs'].shape
    assert width in bucket_lengths(64)
    assert sequences * width <= 300 and sequences % 2 == 0
    assert sequences == batcher.sequences_per_batch(width)
    assert batch['targets'].shape == batch['decoder_inputs'].shape == (sequences, width)
    for i in indices[indices >= 0]:  # each pair is in the smallest bucket holding both sides
      longest = max(len(split.sources[i]), len(split.targets[i]))
      assert width == min(L for L in bucket_lengths(64) if L >= longest)
    shapes.add((sequences, width))
    seen += _pair_ids(batch)
  assert sorted(seen) == _all_ids(split)
  assert len(shapes) <= len(bucket_lengths(64))


def test_sequences_hold_their_pairs_and_decoder_inputs_are_targets_shifted_right():
  split = _split(n=50)
  batcher = Batcher(split, max_length=64, tokens_per_batch=256)
  for length, indices in batcher.plan(seed=0):
    batch = batcher.assemble(length, indices)
    np.testing.assert_array_equal(batch['decoder_inputs'][:, 0], 0)
    np.testing.assert_array_equal(batch['decoder_inputs'][:, 1:], batch['targets'][:, :-1])
    for sequence, i in enumerate(indices):
      for name, side in (('inputs', split.sources), ('targets', split.targets)):
        ids = side[i] if i >= 0 else []  # -1: an empty sequence filling up the last batch
        np.testing.assert_array_equal(batch[name][sequence, :len(ids)], ids)
        assert not batch[name][sequence, len(ids):].any()


@pytest.mark.parametrize('pack_length', [0, 32])
def test_restored_iterator_continues_with_exactly_the_next_batch(pack_length):
  batcher = Batcher(_split(), max_length=64, tokens_per_batch=400, pack_length=pack_length)
  epoch_length = len(batcher.plan(seed=7))  # every epoch's (packed: epoch 0's sequences refilled)
  reference = TrainIterator(batcher, seed=7)
  stream = [next(reference) for _ in range(3 * epoch_length + 5)]  # into epoch 3
  for stop in (0, 3, epoch_length - 1, epoch_length + 2, 3 * epoch_length + 2):
    first = TrainIterator(batcher, seed=7)
    for _ in range(stop):
      next(first)
    resumed = TrainIterator(batcher, seed=7)
    resumed.set_state(first.get_state())
    for want in stream[stop:stop + 3]:
      got = next(resumed)
      for key in want:
        np.testing.assert_array_equal(got[key], want[key])


def test_a_position_saved_under_other_batching_keeps_its_fraction_of_the_epoch():
  # Resumed with twice the batch size (or on other devices): the saved index may lie beyond the
  # new plan's end; the epoch continues as far through as it was.
  split = _split()
  narrow, wide = (Batcher(split, max_length=64, tokens_per_batch=tokens) for tokens in (400, 800))
  narrow_batches, wide_batches = len(narrow.plan(seed=7)), len(wide.plan(seed=7))
  assert wide_batches < narrow_batches - 5
  first = TrainIterator(narrow, seed=7)
  for _ in range(narrow_batches - 2):
    next(first)
  state = json.loads(json.dumps(first.get_state()))  # as a checkpoint stores it
  resumed = TrainIterator(wide, seed=7)
  resumed.set_state(state)
  index = round((narrow_batches - 2) * wide_batches / narrow_batches)
  assert resumed.get_state()['epoch'] == 0 and resumed.get_state()['index'] == index
  assert _pair_ids(next(resumed)) == _pair_ids(wide.assemble(*wide.plan(seed=7)[index]))
  # A position saved without its batching (older checkpoints) is taken as it is.
  resumed.set_state({'epoch': 1, 'index': 3})
  assert resumed.get_state()['index'] == 3
  # ... also when it lies beyond this plan's end: the next epoch starts.
  resumed.set_state({'epoch': 0, 'index': wide_batches + 3})
  assert _pair_ids(next(resumed)) == _pair_ids(wide.assemble(*wide.plan(seed=7, epoch=1)[0]))
  assert resumed.get_state()['epoch'] == 1


@pytest.mark.parametrize('pack_length', [0, 32])
def test_epochs_are_shuffled_differently_and_deterministically(pack_length):
  batcher = Batcher(_split(), max_length=64, tokens_per_batch=400, pack_length=pack_length)
  first = [_pair_ids(batcher.assemble(*b)) for b in batcher.plan(seed=1, epoch=0)]
  again = [_pair_ids(batcher.assemble(*b)) for b in batcher.plan(seed=1, epoch=0)]
  second = [_pair_ids(batcher.assemble(*b)) for b in batcher.plan(seed=1, epoch=1)]
  assert first == again and first != second
  assert sorted(sum(first, [])) == sorted(sum(second, []))


@pytest.mark.parametrize('process_count, pack_length', [(2, 0), (4, 0), (2, 32), (4, 32)])
def test_process_shards_are_disjoint_and_cover_every_batch(process_count, pack_length):
  split = _split()
  batcher = Batcher(split, max_length=64, tokens_per_batch=512, sequences_multiple=4,
                    pack_length=pack_length)
  iterators = [TrainIterator(batcher, seed=5, process_index=p, process_count=process_count)
               for p in range(process_count)]
  whole = TrainIterator(batcher, seed=5)
  epoch_length = len(batcher.plan(seed=5))
  for _ in range(2):  # epoch 0, and epoch 1 (packed: epoch 0's sequences refilled)
    seen = []
    for _ in range(epoch_length):
      parts = [next(it) for it in iterators]
      full = next(whole)
      assert len({p['inputs'].shape for p in parts}) == 1  # every process sees one shape
      assert full['inputs'].shape[0] == process_count * parts[0]['inputs'].shape[0]
      for key in full:
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), full[key])
      seen += sum((_pair_ids(p) for p in parts), [])
    assert sorted(seen) == _all_ids(split)  # the epoch's shares: every pair, once


def test_eval_batches_see_every_pair_once_in_length_order():
  split = _split()
  batcher = Batcher(split, max_length=64, tokens_per_batch=256)
  batches = list(eval_batches(batcher))
  assert sorted(sum((_pair_ids(b) for b in batches), [])) == _all_ids(split)
  widths = [b['inputs'].shape[1] for b in batches]
  assert widths == sorted(widths)


def test_padding_fraction_counts_empty_positions():
  sources = [np.ones(8, np.int32) * 5] * 4 + [np.ones(4, np.int32) * 5] * 4
  targets = [np.ones(8, np.int32) * 5] * 4 + [np.ones(2, np.int32) * 5] * 4
  split = TokenizedSplit.from_pairs(sources, targets, max_length=8)
  batcher = Batcher(split, max_length=8, tokens_per_batch=64)
  plan = batcher.plan(seed=None)
  # One bucket of length 8 with 8 sequences: 4 full pairs, 4 pairs half-full on the source side
  # (16 of 64 positions empty) and a quarter full on the target side (24 of 64 empty).
  assert padding_fraction(batcher, plan, ('sources',)) == pytest.approx(16 / 64)
  assert padding_fraction(batcher, plan, ('targets',)) == pytest.approx(24 / 64)
  assert padding_fraction(batcher, plan) == pytest.approx(40 / 128)


def test_too_small_token_budget_is_an_error_naming_the_fields():
  with pytest.raises(ValueError, match=r'100 tokens \(config.data.tokens_per_batch.*2 '
                     r'sequence\(s\) of config.data.max_length=64'):
    Batcher(_split(), max_length=64, tokens_per_batch=100, sequences_multiple=2)


def test_sequences_that_processes_cannot_share_evenly_are_an_error_naming_the_fields():
  batcher = Batcher(_split(), max_length=64, tokens_per_batch=512, sequences_multiple=4)
  with pytest.raises(ValueError, match='multiples of 4 .*config.parallel.*grad_accum_steps.*3 '
                     'processes'):
    TrainIterator(batcher, seed=0, process_index=0, process_count=3)


def _planners():
  return [thread for thread in threading.enumerate() if thread.name == PLANNER_THREAD]


def _assert_same_batch(got, want):
  assert set(got) == set(want)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def _hooked(hook, **kwargs):
  """A Batcher whose plan calls hook(epoch, cancel) first, and the same Batcher without."""

  class Hooked(Batcher):

    def plan(self, seed, epoch=0, cancel=None, packed=None):
      hook(epoch, cancel)
      return super().plan(seed, epoch, cancel, packed)

  split = _split()
  return (Hooked(split, max_length=64, tokens_per_batch=400, **kwargs),
          Batcher(split, max_length=64, tokens_per_batch=400, **kwargs))


@pytest.mark.parametrize('pack_length', [0, 32])
def test_planning_ahead_yields_exactly_the_planned_batches(pack_length, monkeypatch):
  started = []  # every planner thread, recorded as it starts (it may end before we look)
  start = threading.Thread.start

  def recording(thread):
    if thread.name == PLANNER_THREAD:
      started.append(thread)
    start(thread)

  monkeypatch.setattr(threading.Thread, 'start', recording)
  packing_threads = []  # the thread of each first-fit decreasing
  pack = batching.first_fit_decreasing

  def counted(*args):
    packing_threads.append(threading.current_thread().name)
    return pack(*args)

  monkeypatch.setattr(batching, 'first_fit_decreasing', counted)
  batcher = Batcher(_split(), max_length=64, tokens_per_batch=400, pack_length=pack_length)
  with TrainIterator(batcher, seed=7) as iterator:
    for epoch in range(4):
      plan = batcher.plan(seed=7, epoch=epoch)
      for index, (length, indices) in enumerate(plan):
        _assert_same_batch(next(iterator), batcher.assemble(length, indices))
        assert iterator.get_state()['epoch'] == epoch
        assert iterator.get_state()['index'] == index + 1
        assert iterator.get_state()['batches'] == len(plan)
  assert len(started) >= 4  # the epochs were planned in threads: the checks below are not empty
  # The iterator packed epoch 0's sequences once, in its planner; each `plan` above, for itself.
  assert packing_threads.count(PLANNER_THREAD) == (1 if pack_length else 0)
  assert len(packing_threads) == (5 if pack_length else 0)
  assert all(thread.daemon for thread in started)  # never holds up the interpreter's exit
  assert not any(thread.is_alive() for thread in started)


def test_set_state_to_another_epoch_stops_the_plan_under_way():
  planned, stopped = [], []

  def hook(epoch, cancel):
    planned.append(epoch)
    if epoch == 1:  # stands for a long plan: ends only when cancelled
      stopped.append(cancel.wait(timeout=30))
      raise PlanCancelled

  hooked, batcher = _hooked(hook)
  iterator = TrainIterator(hooked, seed=3)
  next(iterator)  # epoch 0 taken: epoch 1 is being planned
  start = time.perf_counter()
  iterator.set_state({'epoch': 3, 'index': 2})
  assert time.perf_counter() - start < 1.0 and stopped == [True]
  plan = batcher.plan(seed=3, epoch=3)
  for length, indices in plan[2:]:
    _assert_same_batch(next(iterator), batcher.assemble(length, indices))
  _assert_same_batch(next(iterator), batcher.assemble(*batcher.plan(seed=3, epoch=4)[0]))
  # The epoch being planned ahead is taken as it is, not planned again.
  iterator.set_state({'epoch': 5, 'index': 1})
  _assert_same_batch(next(iterator), batcher.assemble(*batcher.plan(seed=3, epoch=5)[1]))
  assert planned[:5] == [0, 1, 3, 4, 5] and planned[5:] in ([], [6])
  iterator.close()


def test_a_planning_failure_is_raised_by_next():
  error = MemoryError('no room for the plan')

  def hook(epoch, cancel):
    del cancel
    if epoch == 1:
      raise error

  hooked, batcher = _hooked(hook, pack_length=32)
  iterator = TrainIterator(hooked, seed=0)
  for _ in range(len(batcher.plan(seed=0))):
    next(iterator)
  with pytest.raises(MemoryError) as raised:
    next(iterator)
  assert raised.value is error
  iterator.close()


def test_close_stops_a_long_plan_at_once(monkeypatch):
  packing = threading.Event()  # set at the first look at the cancel event, in the packing loop
  look = batching._stop_if_cancelled

  def looking(cancel):
    packing.set()
    look(cancel)

  monkeypatch.setattr(batching, '_stop_if_cancelled', looking)
  rng = np.random.default_rng(0)
  count = 2_000_000  # their first-fit decreasing lasts far longer than the test waits
  sides = []
  for lengths in rng.integers(1, 129, (2, count)):
    ids = np.broadcast_to(np.int32(5), (int(lengths.sum()),))  # never read by the plan
    sides.append(Sequences.from_lengths(ids, lengths))
  batcher = Batcher(TokenizedSplit(*sides, 0), max_length=128, tokens_per_batch=25000,
                    pack_length=128)
  iterator = TrainIterator(batcher, seed=0)  # epoch 0 planned in the background
  raised = []

  def take():
    try:
      next(iterator)
    except RuntimeError as error:
      raised.append(error)

  taker = threading.Thread(target=take)  # as a thread feeding the training loop takes batches
  taker.start()
  assert packing.wait(timeout=60)  # past the plan's first steps, which are not cancellable
  assert _planners() and taker.is_alive()  # waiting for the plan
  start = time.perf_counter()
  iterator.close()
  assert time.perf_counter() - start < 1.0
  assert not _planners()
  taker.join(timeout=1.0)
  assert len(raised) == 1 and 'closed' in str(raised[0])
  with pytest.raises(RuntimeError, match='closed'):
    next(iterator)
  iterator.close()  # again: nothing to do


def test_train_lengths_are_the_lengths_of_a_planned_epoch():
  split = _split()  # sides of 1 to 64 tokens
  for pack_length, expected in ((0, bucket_lengths(64)), (64, [64]), (40, [40, 48, 56, 64])):
    batcher = Batcher(split, max_length=64, tokens_per_batch=512, pack_length=pack_length)
    assert batcher.train_lengths() == expected
    for epoch in range(2):
      assert {length for length, _ in batcher.plan(seed=1, epoch=epoch)} == set(expected)
  # Only buckets that hold pairs.
  short = TokenizedSplit.from_pairs([np.ones(5, np.int32), np.ones(20, np.int32)],
                                    [np.ones(3, np.int32), np.ones(9, np.int32)], 64)
  assert Batcher(short, max_length=64, tokens_per_batch=512).train_lengths() == [8, 24]
  assert Batcher(short, max_length=64, tokens_per_batch=512,
                 pack_length=16).train_lengths() == [16, 24]
