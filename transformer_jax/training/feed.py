"""Training batches off the critical path: each compiled call's batches, assembled, stacked and
placed on the devices by a background thread, a few calls ahead of the training loop.

  with feed.Feed(iterator, model, steps_per_call=8, start=step, end=num_train_steps,
                 ahead=4) as calls:
    for call in calls:                  # call.steps: range of steps; call.batch: on the devices
      state, metrics = ...
      position = calls.get_state()      # the data position after the calls taken so far

A call holds `steps_per_call` (K) steps when it starts at a multiple of K and K steps remain
before `end`; otherwise one step (a run resumed at a step that is not a multiple of K, or the
last steps of a run), so calls end at multiples of K and checkpoints and evaluations, at
multiples of K too (`checks.validate`), fall between calls. K batches stack along a leading
axis (`Trainer.train_steps`); one batch goes alone (`Trainer.train_step`).

The thread is grain's `ThreadPrefetchDatasetIterator`: it keeps `ahead` calls ready and
remembers the data position after each, so `get_state` is the position of the batches taken,
not of those made ahead, and a checkpoint resumes exactly. An error in the thread is raised in
the training loop, with its own type and message and a note saying where it arose; `close`
(on leaving the `with`, however the loop ends) stops the thread and the iterator's planner.
"""

import dataclasses

import grain.experimental

from transformer_jax.data import batching
from transformer_jax.model.sharded_model import ShardedModel


@dataclasses.dataclass(frozen=True)
class Call:
  """The batches of one compiled call: `steps` (1-based step numbers) and `batch`, global
  arrays on the devices, stacked along a leading axis when `len(steps) > 1`."""

  steps: range
  batch: dict

  @property
  def shape(self) -> str:
    """'sequences x length', 'K x sequences x length' when stacked, '(packed)' added when
    packed."""
    shape = ' x '.join(str(n) for n in self.batch['inputs'].shape)
    return shape + (' (packed)' if 'source_segments' in self.batch else '')


class _Calls:
  """The calls from step `start` to `end`, made on whichever thread asks for them; its state,
  which grain keeps after each call, is the iterator's (the position is set on the iterator
  before the Feed is made)."""

  def __init__(self, iterator: batching.TrainIterator, model: ShardedModel, steps_per_call: int,
               start: int, end: int):
    self._iterator, self._model = iterator, model
    self._k, self._step, self._end = steps_per_call, start, end

  def __iter__(self):
    return self

  def __next__(self) -> Call:
    if self._step >= self._end:
      raise StopIteration
    k = self._k if self._step % self._k == 0 and self._step + self._k <= self._end else 1
    batches = [next(self._iterator) for _ in range(k)]
    batch = self._model.put_batch(batches[0]) if k == 1 else self._model.put_batches(batches)
    steps = range(self._step + 1, self._step + k + 1)
    self._step += k
    return Call(steps, batch)

  def get_state(self) -> dict:
    return self._iterator.get_state()


class Feed:
  """Calls of up to `steps_per_call` steps from `start` to `end`, prepared `ahead` calls ahead
  in a background thread (`ahead` 0: on the caller's thread, when asked for)."""

  def __init__(self, iterator: batching.TrainIterator, model: ShardedModel, steps_per_call: int,
               start: int, end: int, ahead: int):
    self._iterator = iterator
    self._calls = grain.experimental.ThreadPrefetchDatasetIterator(
        _Calls(iterator, model, steps_per_call, start, end), ahead)
    self._next_step = start + 1

  def __iter__(self):
    return self

  def __next__(self) -> Call:
    try:
      call = next(self._calls)
    except StopIteration:
      raise
    except Exception as error:
      error.add_note(f'(raised while preparing the training batches of step {self._next_step}, '
                     'transformer_jax.training.feed)')
      raise
    self._next_step = call.steps[-1] + 1
    return call

  def get_state(self) -> dict:
    """The data iterator's position after the calls taken so far."""
    return self._calls.get_state()

  def close(self) -> None:
    """Stops the thread (and the iterator's planner first, so that no plan holds it up)."""
    self._iterator.close()
    self._calls.close()

  def __enter__(self) -> 'Feed':
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
