"""Token-based, length-bucketed batches (§5.1), and the restorable training iterator.

§5.1: "Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens."

A pair goes to the smallest bucket whose length L holds both its sides. A batch of bucket L
holds a fixed number of sequences (each side's (sequences, L) array), the most that keep
sequences x L <= tokens_per_batch on each side (padding included), rounded down to a multiple
of `sequences_multiple` (in training the batch shards times the gradient accumulation steps:
every micro-batch splits over the devices), so the training step sees one shape per bucket and
compiles a bounded number of times. A bucket's last batch of an epoch is filled up with empty
(all-padding) sequences, which the loss ignores: no pair is dropped.

Packing (an option, `pack_length` > 0; tensor2tensor and the Flax examples pack): training
pairs whose sides both fit in `pack_length` tokens share sequences of that length, several
pairs per sequence, so that little of a sequence is padding. `source_segments` and
`target_segments` (1, 2, ... per pair, 0 on padding) tell the model where each pair is, and
each pair's decoder inputs start with PAD_ID. Longer pairs keep one sequence each, in the
buckets above `pack_length`. Evaluation batches are never packed.

Epoch 0 packs first-fit decreasing (longest pairs first, ties in the epoch's random order; each
pair in the first sequence with room on both sides), a Python loop over the pairs, so it is
done once: later epochs reuse epoch 0's packed sequences, as tensor2tensor reuses the sequences
it packs once when it writes the dataset. Unlike tensor2tensor's, the sequences change
members: each place of a packed sequence keeps the (source length, target length) of the pair
epoch 0 put there, and each epoch deals the pairs of every such length to that length's places
in its own random order. A later epoch's sequences are then exactly as full as epoch 0's, and a
pair's sequence-mates differ from epoch to epoch. Every epoch's sequences are shuffled into
batches.

Each epoch's plan is a pure function of (seed, epoch), so an iterator's position is two
integers that restore it exactly under the same batching. The training iterator plans the next
epoch in a background thread while the current one is read: it packs epoch 0's sequences once
there and keeps them, and a later epoch's plan is array operations over them, so an epoch
boundary does not wait. A batch, packed or not, is assembled from the token ids with array
operations, no Python loop over its sequences or pairs. With several processes every process
computes the same plan and reads only its own block of sequences of each batch: disjoint
shards that together cover the batch.
"""

import collections
import collections.abc
import dataclasses
import heapq
import itertools
import threading
from typing import Iterator, Sequence

from absl import logging
import numpy as np

from transformer_jax.data.tokenizer import PAD_ID

PLANNER_THREAD = 'transformer_jax-plan'  # the name of TrainIterator's planning thread
_CANCEL_EVERY = 4096  # pairs placed by first-fit decreasing between looks at its cancel event


class PlanCancelled(Exception):
  """A plan stopped by its cancellation event (`TrainIterator.close`, or a plan no longer
  wanted)."""


def bucket_lengths(max_length: int, buckets: str = 'fine') -> list[int]:
  """Bucket lengths ending at max_length. 'fine': multiples of 8 up to 64, then growing by
  ~1/4 (11 buckets for max_length 128); 'coarse': max_length / 4 and / 2 rounded up to
  multiples of 8, and max_length (at most 3 buckets)."""
  if buckets == 'coarse':
    return sorted({-(-max_length // (8 * part)) * 8 for part in (4, 2)} - {max_length}
                  | {max_length})
  lengths, length = [], 8
  while length < max_length:
    lengths.append(length)
    length = length + 8 if length < 64 else (length * 5 // 4 + 7) // 8 * 8
  return lengths + [max_length]


@dataclasses.dataclass(frozen=True, eq=False)
class Sequences(collections.abc.Sequence):
  """Token id sequences stored end to end in one array: sequence i is ids[starts[i]:ends[i]]
  (one side of a pair; a batch's sequence holds one, or several packed)

  `ids` may be memory-mapped (`token_store`): then reading sequence i reads its pages only.
  """

  ids: np.ndarray
  starts: np.ndarray
  ends: np.ndarray

  @classmethod
  def from_lengths(cls, ids: np.ndarray, lengths: np.ndarray) -> 'Sequences':
    ends = np.cumsum(lengths, dtype=np.int64)
    return cls(ids, ends - lengths, ends)

  @classmethod
  def of(cls, arrays: Sequence[np.ndarray]) -> 'Sequences':
    lengths = np.array([len(a) for a in arrays], np.int64)
    ids = np.concatenate(arrays) if len(arrays) else np.zeros(0, np.int32)
    return cls.from_lengths(ids, lengths)

  def __len__(self) -> int:
    return len(self.starts)

  def __getitem__(self, i: int) -> np.ndarray:
    return self.ids[self.starts[i]:self.ends[i]]

  @property
  def lengths(self) -> np.ndarray:
    return self.ends - self.starts

  def take(self, indices: np.ndarray) -> 'Sequences':
    """The sequences at `indices`, sharing `ids`."""
    return Sequences(self.ids, self.starts[indices], self.ends[indices])


@dataclasses.dataclass(frozen=True)
class TokenizedSplit:
  """Token ids of a split's kept pairs (each side ends with EOS) and how many were dropped."""

  sources: Sequences
  targets: Sequences
  num_dropped: int

  @classmethod
  def from_pairs(cls, sources: Sequences | Sequence[np.ndarray],
                 targets: Sequences | Sequence[np.ndarray], max_length: int) -> 'TokenizedSplit':
    """Drops the pairs with a side longer than max_length tokens."""
    sources, targets = (side if isinstance(side, Sequences) else Sequences.of(side)
                        for side in (sources, targets))
    keep = np.flatnonzero((sources.lengths <= max_length) & (targets.lengths <= max_length))
    return cls(sources.take(keep), targets.take(keep), len(sources) - len(keep))

  def __len__(self) -> int:
    return len(self.sources)


def sequences_per_batch(tokens_per_batch: int, length: int, sequences_multiple: int) -> int:
  """Sequences in a batch of sequences of `length` tokens: the most that hold
  `tokens_per_batch` tokens, padding included, rounded down to a multiple of
  `sequences_multiple`."""
  return tokens_per_batch // length // sequences_multiple * sequences_multiple


@dataclasses.dataclass(frozen=True, eq=False)
class PackedSequences:
  """Packed sequences stored end to end: sequence r holds the pairs
  pairs[starts[r]:starts[r] + sizes[r]], in the order they were placed."""

  pairs: np.ndarray  # pair indices, int64, sequence after sequence
  sizes: np.ndarray  # pairs in each sequence

  @classmethod
  def of(cls, packed: list[list[int]]) -> 'PackedSequences':
    sizes = np.array([len(pairs) for pairs in packed], np.int64)
    return cls(np.fromiter(itertools.chain.from_iterable(packed), np.int64, int(sizes.sum())),
               sizes)

  @property
  def starts(self) -> np.ndarray:
    return np.cumsum(self.sizes) - self.sizes

  def refilled(self, pairs: np.ndarray, kinds: np.ndarray) -> 'PackedSequences':
    """These sequences with `pairs` (the same pairs in another order) in their places: each
    place gets a pair of the kind (`kinds[pair]`) of the one it held, a kind's pairs going to
    its places in sequence order as they come in `pairs`."""
    places = np.argsort(kinds[self.pairs], kind='stable')
    refilled = np.empty_like(self.pairs)
    refilled[places] = pairs[np.argsort(kinds[pairs], kind='stable')]
    return PackedSequences(refilled, self.sizes)

  def reordered(self, order: np.ndarray) -> 'PackedSequences':
    """Sequences `order` of these, in that order."""
    sizes = self.sizes[order]
    moved = np.repeat(self.starts[order] - (np.cumsum(sizes) - sizes), sizes)
    return PackedSequences(self.pairs[np.arange(len(self.pairs)) + moved], sizes)


@dataclasses.dataclass(frozen=True)
class Batcher:
  """Plans batches of one split: which pairs go together, in which order."""

  split: TokenizedSplit
  max_length: int
  tokens_per_batch: int
  sequences_multiple: int = 1
  pack_length: int = 0  # 0: no packing
  buckets: str = 'fine'  # bucket_lengths' scheme

  def __post_init__(self):
    if self.tokens_per_batch < self.max_length * self.sequences_multiple:
      raise ValueError(
          f'a batch of {self.tokens_per_batch} tokens (config.data.tokens_per_batch; for '
          'evaluation divided by config.train.grad_accum_steps) cannot hold '
          f'{self.sequences_multiple} sequence(s) of config.data.max_length={self.max_length} '
          'tokens (sequences come in multiples of the batch shards times the accumulation steps)')

  @property
  def lengths(self) -> list[int]:
    return bucket_lengths(self.max_length, self.buckets)

  def sequences_per_batch(self, length: int) -> int:
    """Sequences in a batch of bucket `length` (`sequences_per_batch`)."""
    return sequences_per_batch(self.tokens_per_batch, length, self.sequences_multiple)

  def _side_lengths(self) -> tuple[np.ndarray, np.ndarray]:
    return self.split.sources.lengths, self.split.targets.lengths

  def _batches(self, length: int, packed: PackedSequences) -> list[tuple[int, np.ndarray]]:
    """Packed sequences grouped in order into batches of `length`, each (sequences, the most
    pairs of its sequences), -1-padded; the last batch filled up with empty sequences. With
    array operations, no Python loop over the sequences: a WMT epoch packs into hundreds of
    thousands."""
    per_batch = self.sequences_per_batch(length)
    count = -(-len(packed.sizes) // per_batch)
    sizes = np.zeros(count * per_batch, np.int64)
    sizes[:len(packed.sizes)] = packed.sizes
    widths = sizes.reshape(count, per_batch).max(axis=1)
    # The batches lie end to end in `cells`, each (per_batch, its width) in row-major order.
    batch_starts = np.cumsum(per_batch * widths) - per_batch * widths
    batch = np.arange(len(packed.sizes)) // per_batch
    sequence_starts = (batch_starts[batch]
                       + np.arange(len(packed.sizes)) % per_batch * widths[batch])
    in_sequence = np.arange(len(packed.pairs)) - np.repeat(packed.starts, packed.sizes)
    cells = np.full(int(per_batch * widths.sum()), -1, np.int64)
    cells[np.repeat(sequence_starts, packed.sizes) + in_sequence] = packed.pairs
    return [(length, cells[start:start + per_batch * width].reshape(per_batch, width))
            for start, width in zip(batch_starts.tolist(), widths.tolist())]

  def _single_pair_batches(self, length: int,
                           members: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """`_batches` of one pair per sequence, at once: a WMT epoch has millions of them."""
    per_batch = self.sequences_per_batch(length)
    indices = np.full(-(-len(members) // per_batch) * per_batch, -1, np.int64)
    indices[:len(members)] = members
    indices = indices.reshape(-1, per_batch)
    if self.pack_length:  # as the packed sequences: (sequences, pairs per sequence)
      indices = indices[..., None]
    return [(length, chunk) for chunk in indices]

  def packed_sequences(self, seed: int, cancel: threading.Event | None = None) -> PackedSequences:
    """Epoch 0's packed sequences: first-fit decreasing over the pairs that fit pack_length, ties in
    the order of rng([seed, 0]), as `plan` shuffles epoch 0. Raises PlanCancelled soon after
    `cancel` is set."""
    sources, targets = self._side_lengths()
    order = np.random.default_rng([seed, 0]).permutation(len(sources))
    fits = order[np.maximum(sources[order], targets[order]) <= self.pack_length]
    return PackedSequences.of(first_fit_decreasing(fits, sources, targets, self.pack_length,
                                                   cancel))

  def plan(self, seed: int | None, epoch: int = 0, cancel: threading.Event | None = None,
           packed: PackedSequences | None = None) -> list[tuple[int, np.ndarray]]:
    """Batches as (sequence length, pair indices with -1 for empty sequences: (sequences,), or
    (sequences, pairs per sequence) when packed). With a seed, pairs are shuffled within
    buckets and batches are shuffled, differently each epoch; without one (evaluation, never
    packed) the order is by length and then by position in the split. Packed, epoch 0's
    sequences are `packed` (this seed's `packed_sequences`, made here if not given) and a later
    epoch's are those refilled, each place with a pair of its pair's (source, target) lengths,
    in the epoch's random order. Raises
    PlanCancelled soon after `cancel` is set, also halfway through packing, the long part of a
    large split's plan."""
    sources, targets = self._side_lengths()
    buckets = np.searchsorted(np.array(self.lengths), np.maximum(sources, targets))
    order = np.arange(len(buckets))
    rng = None
    if seed is not None:
      rng = np.random.default_rng([seed, epoch])
      order = rng.permutation(order)
    batches = []
    packing = bool(self.pack_length) and seed is not None
    if packing:
      fits = np.maximum(sources[order], targets[order]) <= self.pack_length
      if packed is None:
        packed = self.packed_sequences(seed, cancel)
      if epoch:  # a pair's kind: its (source, target) lengths, as one number
        packed = packed.refilled(order[fits], sources * (self.pack_length + 1) + targets)
      _stop_if_cancelled(cancel)
      batches += self._batches(self.pack_length,
                               packed.reordered(rng.permutation(len(packed.sizes))))
      _stop_if_cancelled(cancel)
      order = order[~fits]
    for b, length in enumerate(self.lengths):
      members = order[buckets[order] == b]
      if len(members):
        batches += self._single_pair_batches(length, members)
    if rng is not None:
      batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches

  def train_lengths(self) -> list[int]:
    """The sequence lengths that the batches of a training epoch (`plan` with a seed) have, sorted:
    with packing, pack_length and the buckets holding pairs too long to pack; without, the
    buckets holding pairs. One length means one batch shape for every training step."""
    sources, targets = self._side_lengths()
    longest = np.maximum(sources, targets)
    packed = set()
    if self.pack_length:
      packed = {self.pack_length} if (longest <= self.pack_length).any() else set()
      longest = longest[longest > self.pack_length]
    buckets = np.unique(np.searchsorted(np.array(self.lengths), longest))
    return sorted(packed | {self.lengths[b] for b in buckets})

  def assemble(self, length: int, indices: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays of one batch: `inputs` (source ids), `targets`, and `decoder_inputs`, the
    targets shifted right behind PAD_ID (tensor2tensor's start symbol). (sequences, length) int32,
    padded with PAD_ID. When packed (2-D `indices`), also `source_segments` and
    `target_segments` (1, 2, ... per pair in sequence order, 0 on padding), and each pair's decoder
    inputs start with PAD_ID. Gathered with array operations: a batch is assembled on the
    training loop's critical path."""
    if indices.ndim == 1:  # one pair per sequence
      batch = {'inputs': _padded(self.split.sources, indices, length),
               'targets': _padded(self.split.targets, indices, length)}
      batch['decoder_inputs'] = np.pad(batch['targets'][:, :-1], ((0, 0), (1, 0)),
                                       constant_values=PAD_ID)
      return batch
    inputs, source_segments = _packed(self.split.sources, indices, length)
    targets, target_segments = _packed(self.split.targets, indices, length)
    return {'inputs': inputs, 'targets': targets,
            'decoder_inputs': _shifted_within_segments(targets, target_segments),
            'source_segments': source_segments, 'target_segments': target_segments}


def _spans(side: Sequences, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Where the sequences at `indices` lie in side.ids: their starts and lengths, both 0 where
  an index is -1."""
  real = indices >= 0
  starts = np.where(real, side.starts[indices], 0)
  return starts, np.where(real, side.ends[indices] - starts, 0)


def _padded(side: Sequences, indices: np.ndarray, length: int) -> np.ndarray:
  """(sequences, length) int32: sequence r is `side`'s sequence indices[r] followed by PAD_ID,
  or only PAD_ID where indices[r] is -1."""
  starts, lengths = _spans(side, indices)
  positions = np.arange(length)
  filled = positions < lengths[:, None]
  ids = np.full((len(indices), length), PAD_ID, np.int32)
  ids[filled] = side.ids[(starts[:, None] + positions)[filled]]
  return ids


def _packed(side: Sequences, indices: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
  """Token ids and segment ids, (sequences, length) int32 each: sequence r holds `side`'s
  sequences indices[r] end to end (-1s skipped), the k-th of them marked k in the segment ids,
  then PAD_ID and segment 0."""
  starts, lengths = _spans(side, indices)
  per_pair = lengths.ravel()
  # A sequence's tokens fill its first columns, so the filled cells in row-major order are the
  # tokens of the pairs in `indices`' row-major order.
  filled = np.arange(length) < lengths.sum(axis=1)[:, None]
  first_token = np.cumsum(per_pair) - per_pair  # each pair's first among those tokens
  ids = np.full((len(indices), length), PAD_ID, np.int32)
  ids[filled] = side.ids[np.arange(per_pair.sum()) + np.repeat(starts.ravel() - first_token,
                                                               per_pair)]
  segments = np.zeros((len(indices), length), np.int32)
  segments[filled] = np.repeat(np.cumsum(indices >= 0, axis=1).ravel(), per_pair)
  return ids, segments


def _shifted_within_segments(targets: np.ndarray, segments: np.ndarray) -> np.ndarray:
  """Decoder inputs of packed sequences: each pair's targets shifted right by one behind PAD_ID,
  as if the pair were alone in its sequence."""
  decoder_inputs = np.full_like(targets, PAD_ID)
  same_pair = segments[:, 1:] == segments[:, :-1]  # also on padding, whose targets are PAD_ID
  decoder_inputs[:, 1:] = np.where(same_pair, targets[:, :-1], PAD_ID)
  return decoder_inputs


def _stop_if_cancelled(cancel: threading.Event | None) -> None:
  if cancel is not None and cancel.is_set():
    raise PlanCancelled


def first_fit_decreasing(order: np.ndarray, sources: np.ndarray, targets: np.ndarray,
                          length: int, cancel: threading.Event | None = None) -> list[list[int]]:
  """Packed sequences as lists of pair indices, each sequence's sources and targets within
  `length` tokens: the pairs, longest first (ties in `order`), each join the first sequence with
  room on both sides, or open a new one. Raises PlanCancelled within a few thousand pairs of
  `cancel` being set.

  Sequences are kept by how much room they have left: `first[a, b]` is the lowest-numbered
  sequence with exactly a source and b target tokens free (a heap per (a, b) holds them all),
  and `first_from[a, b]` the least of first[a, b:]. The first sequence with room for a pair of
  (s, t) tokens is then the least of first_from[s:, t], so a pair costs O(length) whatever the
  number of sequences (a WMT epoch packs into ~10^6 of them)."""
  order = order[np.argsort(-(sources[order] + targets[order]), kind='stable')]
  none = np.iinfo(np.int64).max
  first = np.full((length + 1, length + 1), none, np.int64)
  first_from = first.copy()
  with_room: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
  packed: list[list[int]] = []

  def update(a: int, b: int) -> None:
    first[a, b] = with_room[a, b][0] if with_room[a, b] else none
    first_from[a] = np.minimum.accumulate(first[a, ::-1])[::-1]

  for chunk in range(0, len(order), _CANCEL_EVERY):  # `cancel` between chunks, not per pair
    _stop_if_cancelled(cancel)
    for i in order[chunk:chunk + _CANCEL_EVERY]:
      s, t = int(sources[i]), int(targets[i])
      a = s + int(np.argmin(first_from[s:, t]))
      if first_from[a, t] == none:
        r, a, b = len(packed), length, length
        packed.append([])
      else:
        b = t + int(np.argmin(first[a, t:]))
        r = heapq.heappop(with_room[a, b])
        update(a, b)
      packed[r].append(int(i))
      heapq.heappush(with_room[a - s, b - t], r)
      update(a - s, b - t)
  return packed


class _EpochZeroPacking:
  """One iterator's epoch 0 packed sequences (`Batcher.packed_sequences`), made by the first
  plan that needs them and kept for every later one. Its plans run one at a time (a planning
  starts once the last one ended or was stopped), so they share this without a lock."""

  def __init__(self, batcher: Batcher, seed: int):
    self._batcher, self._seed = batcher, seed
    self._packed: PackedSequences | None = None

  def get(self, cancel: threading.Event) -> PackedSequences | None:
    """The packed sequences (None without packing), packed now if no plan has yet."""
    if self._packed is None and self._batcher.pack_length:
      self._packed = self._batcher.packed_sequences(self._seed, cancel)
    return self._packed


class _Planning:
  """The plan of one epoch, made in a daemon thread (which never holds up the interpreter's
  exit)."""

  def __init__(self, batcher: Batcher, seed: int, epoch: int, packed: _EpochZeroPacking):
    self.epoch = epoch
    self._cancel = threading.Event()
    self._plan, self._error = None, None
    self._thread = threading.Thread(target=self._run, args=(batcher, seed, packed),
                                    name=PLANNER_THREAD, daemon=True)
    self._thread.start()

  def _run(self, batcher: Batcher, seed: int, packed: _EpochZeroPacking) -> None:
    try:
      self._plan = batcher.plan(seed, self.epoch, self._cancel, packed=packed.get(self._cancel))
    except BaseException as error:  # raised again by result(), in the consumer's thread
      self._error = error

  def result(self) -> list[tuple[int, np.ndarray]]:
    """The plan, once made; what planning raised, raised again."""
    self._thread.join()
    if self._error is not None:
      raise self._error
    return self._plan

  def cancel(self) -> None:
    """Stops the planning and waits for its thread to end."""
    self._cancel.set()
    self._thread.join()


class TrainIterator(Iterator[dict]):
  """Endless training batches, epoch after epoch, for this process's block of sequences.

  Each epoch is planned in a background thread (`PLANNER_THREAD`), the next one as soon as an
  epoch's plan is taken, so the step that crosses an epoch boundary waits only if training
  outran the planning; the batches are exactly those of `Batcher.plan`. Packed, the first plan
  also packs epoch 0's sequences, once: every later plan refills them. A failure of the
  planning is raised by `__next__`. `close()` (or leaving a `with` block) stops the planning.

  `get_state()` / `set_state()` save and restore the position; a restored iterator yields
  exactly the batches the uninterrupted one would have. The position comes with what the plan
  depends on (`batching()`); restored under other batching (another device count, batch size
  or seed), the iterator continues its epoch at the same fraction of it, with a warning.
  """

  def __init__(self, batcher: Batcher, seed: int, process_index: int = 0,
               process_count: int = 1):
    if batcher.sequences_multiple % process_count:
      raise ValueError(f'a batch\'s sequences come in multiples of {batcher.sequences_multiple} '
                       '(the batch shards of config.parallel times config.train.grad_accum_steps), '
                       f'which the {process_count} processes cannot share evenly')
    self._batcher = batcher
    self._seed = seed
    self._process_index = process_index
    self._process_count = process_count
    self._planning: _Planning | None = None
    self._packed = _EpochZeroPacking(batcher, seed)
    self._closed = False
    self._lock = threading.Lock()
    self._start_epoch(0)

  def batching(self) -> dict:
    """What an epoch's plan depends on besides the epoch."""
    b = self._batcher
    return {'seed': self._seed, 'pairs': len(b.split), 'max_length': b.max_length,
            'tokens_per_batch': b.tokens_per_batch, 'sequences_multiple': b.sequences_multiple,
            'pack_length': b.pack_length, 'buckets': b.buckets}

  def get_state(self) -> dict:
    return {'epoch': self._epoch, 'index': self._index, 'batches': len(self._current_plan()),
            'batching': self.batching()}

  def set_state(self, state: dict) -> None:
    self._check_open()
    if int(state['epoch']) != self._epoch:  # the plan of this epoch is already made or begun
      self._start_epoch(int(state['epoch']))
    self._index = int(state['index'])
    saved = state.get('batching')  # absent from checkpoints written before it was saved
    if saved is not None:
      saved = {'buckets': 'fine', **saved}  # the only scheme before there was a choice
    if saved is not None and saved != self.batching():
      changes = ', '.join(f'{name} {saved.get(name)} -> {value}'
                          for name, value in self.batching().items() if saved.get(name) != value)
      batches = len(self._current_plan())
      index = min(round(self._index * batches / state['batches']), batches)
      logging.warning('The batching changed since this data position was saved (%s): epoch %d '
                      'continues at batch %d of %d, the same fraction of it as batch %d of %d.',
                      changes, self._epoch, index, batches, self._index, state['batches'])
      self._index = index

  def close(self) -> None:
    """Stops the planning (promptly, even halfway through a plan) and leaves no thread
    running; also from another thread than the one taking batches, whose `next` then raises.
    The iterator yields nothing after; closing again does nothing."""
    with self._lock:
      self._closed = True
      planning, self._planning = self._planning, None
    if planning is not None:
      planning.cancel()

  def __enter__(self) -> 'TrainIterator':
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def _check_open(self) -> None:
    if self._closed:
      raise RuntimeError('this TrainIterator is closed: it plans and yields no more batches')

  def _plan_in_background(self, epoch: int) -> None:
    """Makes the planning under way that of `epoch`: kept if it is, else replaced (stopped)."""
    with self._lock:  # against a close() from another thread, which must leave no planner
      self._check_open()
      if self._planning is not None and self._planning.epoch == epoch:
        return
      if self._planning is not None:
        self._planning.cancel()
      self._planning = _Planning(self._batcher, self._seed, epoch, self._packed)

  def _start_epoch(self, epoch: int) -> None:
    """Makes `epoch` the current one; its plan is made in the background, or already under
    way when it is the epoch planned ahead."""
    self._plan_in_background(epoch)
    self._epoch, self._index, self._plan = epoch, 0, None

  def _current_plan(self) -> list[tuple[int, np.ndarray]]:
    """The plan of the current epoch, waited for if it is not made yet; taking it starts the
    plan of the next epoch."""
    if self._plan is None:
      with self._lock:
        self._check_open()
        planning = self._planning
      try:
        plan = planning.result()
      except PlanCancelled:  # by a close() meanwhile
        self._check_open()
        raise
      self._plan_in_background(self._epoch + 1)
      self._plan = plan
    return self._plan

  def __next__(self) -> dict:
    self._check_open()
    if self._index >= len(self._current_plan()):  # also a position restored from a longer plan
      self._start_epoch(self._epoch + 1)
    length, indices = self._current_plan()[self._index]
    self._index += 1
    return self._batcher.assemble(
        length, process_sequences(indices, self._process_index, self._process_count))


def process_sequences(indices: np.ndarray, process_index: int, process_count: int) -> np.ndarray:
  """This process's contiguous block of a batch's sequences."""
  block = len(indices) // process_count
  return indices[process_index * block:(process_index + 1) * block]


def eval_batches(batcher: Batcher, process_index: int = 0,
                 process_count: int = 1) -> Iterator[dict]:
  """One pass over a split, batches ordered by length, every pair exactly once."""
  for length, indices in batcher.plan(seed=None):
    yield batcher.assemble(length, process_sequences(indices, process_index, process_count))


def padding_fraction(batcher: Batcher, plan, sides=('sources', 'targets')) -> float:
  """Share of the planned batches' token positions on `sides` (both by default) that hold
  padding."""
  real = sum(int(getattr(batcher.split, side).lengths.sum()) for side in sides)
  positions = sum(len(sides) * length * len(indices) for length, indices in plan)
  return 1.0 - real / positions
