"""Packed sequences (several sentence pairs per sequence, told apart by segment ids): each pair's
logits are those it has alone, so no attention crosses a pair and positions restart per sentence; a
packed epoch holds every pair once within the sequence length, placed first-fit decreasing (and
stops when cancelled); a packed batch holds exactly the sequences built pair by pair, and has the
loss and gradients of its pairs unpacked. Epoch 0 packs first-fit decreasing; each later epoch
refills epoch 0's sequences, every place with a pair of the lengths of the one it held."""

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, tiny_config, train_config
from transformer_jax.data import batching
from transformer_jax.data.batching import (Batcher, PlanCancelled, Sequences, TokenizedSplit,
                                           first_fit_decreasing, padding_fraction,
                                           process_sequences)
from transformer_jax.loop import train_loop
from transformer_jax.model import loss
from transformer_jax.model.attention import segment_positions
from transformer_jax.model.transformer import Transformer
from transformer_jax.training import metrics_log


def _pairs(rng, vocab, lengths):
  """(source, target) id arrays, each ending with EOS (1)."""
  return [(np.append(rng.integers(3, vocab, s), 1), np.append(rng.integers(3, vocab, t), 1))
          for s, t in lengths]


def _pack(pairs, length):
  """One sequence: the pairs side by side, their segment ids, decoder inputs shifted per pair."""
  sequence = {name: np.zeros(length, np.int32) for name in
         ('inputs', 'targets', 'decoder_inputs', 'source_segments', 'target_segments')}
  s = t = 0
  for segment, (source, target) in enumerate(pairs, start=1):
    sequence['inputs'][s:s + len(source)] = source
    sequence['targets'][t:t + len(target)] = target
    sequence['source_segments'][s:s + len(source)] = segment
    sequence['decoder_inputs'][t + 1:t + len(target)] = target[:-1]  # PAD (0) starts each pair
    sequence['target_segments'][t:t + len(target)] = segment
    s, t = s + len(source), t + len(target)
  return sequence


def test_segment_positions_restart_for_every_sentence():
  segments = jnp.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
  np.testing.assert_array_equal(segment_positions(segments),
                                [[0, 1, 2, 0, 1, 0, 0, 1], [0, 1, 2, 3, 4, 5, 6, 7]])


@pytest.mark.slow
@pytest.mark.parametrize('position_encoding, attention', [
    ('sinusoid', {}), ('learned', {}),
    ('sinusoid', {'attention_impl': 'xla', 'd_k': 6, 'd_v': 6})])  # jax's, with segment masks
def test_packed_pairs_get_the_logits_they_have_alone(position_encoding, attention):
  cfg = tiny_config(position_encoding=position_encoding, max_len=32, **attention)
  module, params = Transformer(cfg), init_params(cfg)
  rng = np.random.default_rng(0)
  sequences = [_pairs(rng, cfg.vocab_size, [(4, 3), (2, 5), (3, 2)]),
               _pairs(rng, cfg.vocab_size, [(7, 6)])]
  length = 16
  packed = [_pack(sequence, length) for sequence in sequences]
  batch = {name: jnp.array(np.stack([sequence[name] for sequence in packed]))
           for name in packed[0]}
  logits = module.apply({'params': params}, batch['inputs'], batch['decoder_inputs'],
                       batch['source_segments'], batch['target_segments'])
  for r, sequence in enumerate(sequences):
    start = 0
    for pair in sequence:
      alone = _pack([pair], length)
      expected = module.apply({'params': params}, jnp.array(alone['inputs'])[None],
                             jnp.array(alone['decoder_inputs'])[None])[0]
      t = len(pair[1])
      np.testing.assert_allclose(logits[r, start:start + t], expected[:t], rtol=1e-5,
                                 atol=1e-5)
      start += t


def _split(rng, count=600):
  """Pairs whose target is about as long as their source, as in translation."""
  source = rng.integers(2, 25, size=count)
  lengths = np.stack([source, np.clip(source + rng.integers(-2, 4, size=count), 1, 30)], 1)
  return TokenizedSplit.from_pairs(
      [np.append(rng.integers(3, 50, s - 1), 1).astype(np.int32) for s, _ in lengths],
      [np.append(rng.integers(3, 50, t - 1), 1).astype(np.int32) for _, t in lengths], 30)


def _packed(plan, length):
  """The pairs of each sequence of a plan's batches of `length`, in sequence order, empty
  sequences left out."""
  return [tuple(sequence[sequence >= 0].tolist()) for sequence_length, indices in plan
          if sequence_length == length for sequence in indices if (sequence >= 0).any()]


@pytest.mark.parametrize('epoch', [0, 1, 2])
def test_a_packed_epoch_holds_every_pair_once_within_the_sequence_length(epoch):
  rng = np.random.default_rng(0)
  split = _split(rng)
  batcher = Batcher(split, max_length=32, tokens_per_batch=256, sequences_multiple=2,
                    pack_length=24)
  plan = batcher.plan(seed=3, epoch=epoch)
  seen = []
  for length, indices in plan:
    batch = batcher.assemble(length, indices)
    assert batch['inputs'].shape == (batcher.sequences_per_batch(length), length)
    for sequence in indices:
      members = sequence[sequence >= 0]
      seen += members.tolist()
      if len(members) > 1:  # only pairs within pack_length share a sequence
        assert length == 24
        assert sum(len(split.sources[i]) for i in members) <= 24
        assert sum(len(split.targets[i]) for i in members) <= 24
  assert sorted(seen) == list(range(len(split)))
  assert {length for length, _ in plan} <= {24, 32}
  # Packing leaves less than half the padding of one pair per sequence.
  unpacked = Batcher(split, max_length=32, tokens_per_batch=256, sequences_multiple=2)
  assert (padding_fraction(batcher, plan)
          < padding_fraction(unpacked, unpacked.plan(seed=3, epoch=epoch)) / 2)
  # Deterministic, also from a Batcher of its own.
  again = Batcher(split, max_length=32, tokens_per_batch=256, sequences_multiple=2,
                  pack_length=24)
  assert [indices.tolist() for _, indices in again.plan(seed=3, epoch=epoch)] == [
      indices.tolist() for _, indices in plan]


def test_epoch_0_packs_first_fit_decreasing_in_the_order_its_seed_shuffles():
  rng = np.random.default_rng(4)
  split = _split(rng)
  batcher = Batcher(split, max_length=32, tokens_per_batch=256, pack_length=24)
  sources, targets = split.sources.lengths, split.targets.lengths
  order = np.random.default_rng([5, 0]).permutation(len(split))
  fits = order[np.maximum(sources[order], targets[order]) <= 24]
  assert 0 < len(fits) < len(split)  # some pairs too long to pack
  expected = _first_fit_by_definition(fits, sources, targets, 24)
  assert sorted(_packed(batcher.plan(seed=5, epoch=0), 24)) == sorted(map(tuple, expected))


def test_later_epochs_refill_epoch_0s_sequences_with_other_sequence_mates():
  rng = np.random.default_rng(5)
  split = _split(rng)
  batcher = Batcher(split, max_length=32, tokens_per_batch=256, pack_length=24)
  lengths = np.stack([split.sources.lengths, split.targets.lengths], 1)

  def shapes(sequences):  # each sequence's pairs' (source, target) lengths, as a multiset
    return sorted(sorted(map(tuple, lengths[list(sequence)].tolist())) for sequence in sequences)

  epochs = [_packed(batcher.plan(seed=2, epoch=epoch), 24) for epoch in range(4)]
  shared = [sequence for sequence in epochs[0] if len(sequence) > 1]
  assert len(shared) > 50  # sequences of several pairs, whose members can change
  for epoch, sequences in enumerate(epochs[1:], start=1):
    assert shapes(sequences) == shapes(epochs[0]), epoch  # every sequence as full as in epoch 0
    # Sequence-mates change: few sequences of several pairs stay as they were.
    for earlier in epochs[:epoch]:
      kept = {frozenset(pairs) for pairs in earlier} & {frozenset(pairs) for pairs in sequences}
      assert len([pairs for pairs in kept if len(pairs) > 1]) < len(shared) / 4, (earlier, epoch)


def test_a_later_epoch_needs_only_epoch_0s_sequences_and_stops_when_cancelled(monkeypatch):
  rng = np.random.default_rng(6)
  batcher = Batcher(_split(rng), max_length=32, tokens_per_batch=256, pack_length=24)
  sequences = batcher.packed_sequences(seed=1)
  expected = [indices.tolist() for _, indices in batcher.plan(seed=1, epoch=3)]

  def packing(*args):
    raise AssertionError('a later epoch packed anew')

  monkeypatch.setattr(batching, 'first_fit_decreasing', packing)
  assert [indices.tolist() for _, indices in batcher.plan(seed=1, epoch=3, packed=sequences)] == \
      expected
  cancel = threading.Event()
  cancel.set()
  with pytest.raises(PlanCancelled):
    batcher.plan(seed=1, epoch=3, cancel=cancel, packed=sequences)


def _assert_sequences_built_pair_by_pair(batcher, length, indices):
  """The batch of `indices` (sequences, pairs per sequence; -1 anywhere is no pair) is `_pack`
  of each sequence's pairs: every key, dtype and shape."""
  split = batcher.split
  batch = batcher.assemble(length, indices)
  sequences = [_pack([(split.sources[i], split.targets[i]) for i in pairs if i >= 0], length)
               for pairs in indices.tolist()]
  assert set(batch) == set(sequences[0])
  for name, value in batch.items():
    assert value.dtype == np.int32 and value.shape == (len(indices), length), name
    np.testing.assert_array_equal(value, np.stack([sequence[name] for sequence in sequences]),
                                  err_msg=name)


@pytest.mark.parametrize('ids_dtype', [np.int32, np.uint16])  # uint16: the token store's ids
def test_a_packed_batch_holds_the_sequences_built_pair_by_pair(ids_dtype):
  rng = np.random.default_rng(2)
  split = _split(rng)
  split = TokenizedSplit(*(Sequences(side.ids.astype(ids_dtype), side.starts, side.ends)
                           for side in (split.sources, split.targets)), 0)
  batcher = Batcher(split, max_length=32, tokens_per_batch=256, sequences_multiple=4,
                    pack_length=24)
  plan = batcher.plan(seed=1, epoch=2)
  padded = [indices for _, indices in plan if (indices < 0).all(1).any()]
  assert padded  # a last batch filled up with empty sequences
  assert any(((indices < 0) & (indices >= 0).any(1, keepdims=True)).any()
             for length, indices in plan if length == 24)  # -1 after a sequence's pairs
  assert {length for length, _ in plan} == {24, 32}  # packed sequences and one long pair a sequence
  for length, indices in plan:
    _assert_sequences_built_pair_by_pair(batcher, length, indices)
    for process in range(4):  # each process's block of sequences
      _assert_sequences_built_pair_by_pair(batcher, length, process_sequences(indices, process, 4))


def test_a_packed_batch_skips_minus_ones_anywhere_in_a_sequence():
  rng = np.random.default_rng(3)
  batcher = Batcher(_split(rng), max_length=32, tokens_per_batch=256, pack_length=32)
  lengths = np.maximum(batcher.split.sources.lengths, batcher.split.targets.lengths)
  short = np.flatnonzero(lengths <= 10)[:5]
  indices = np.array([[short[0], -1, short[1]], [-1, -1, -1], [-1, short[2], -1],
                      [short[3], short[4], -1]])
  _assert_sequences_built_pair_by_pair(batcher, 32, indices)
  _assert_sequences_built_pair_by_pair(batcher, 32, np.full((3, 2), -1))  # no pair at all


def _first_fit_by_definition(order, sources, targets, length):
  """The definition, scanning every sequence: longest pairs first (a stable sort keeps ties in the
  given order), each into the first sequence with room on both sides, else into a new sequence."""
  sequences, used = [], []
  for i in sorted(order.tolist(), key=lambda i: -(sources[i] + targets[i])):
    r = next((r for r, (s, t) in enumerate(used)
              if s + sources[i] <= length and t + targets[i] <= length), len(used))
    if r == len(used):
      sequences.append([])
      used.append((0, 0))
    sequences[r].append(i)
    used[r] = (used[r][0] + sources[i], used[r][1] + targets[i])
  return sequences


@pytest.mark.parametrize('length', [6, 24, 64])
def test_packing_is_first_fit_decreasing(length):
  rng = np.random.default_rng(length)
  sources, targets = rng.integers(1, length + 1, (2, 3000))
  order = rng.permutation(3000)
  assert first_fit_decreasing(order, sources, targets, length) == _first_fit_by_definition(
      order, sources, targets, length)


def test_packing_stops_soon_after_it_is_cancelled(monkeypatch):
  rng = np.random.default_rng(0)
  sources, targets = rng.integers(1, 64, (2, 2_000_000))
  cancel, cancelled_at = threading.Event(), []
  look = batching._stop_if_cancelled

  def cancelling(event):  # cancels at its first look, once placing pairs has begun
    look(event)
    if not cancelled_at:
      cancelled_at.append(time.perf_counter())
      event.set()

  monkeypatch.setattr(batching, '_stop_if_cancelled', cancelling)
  with pytest.raises(PlanCancelled):
    first_fit_decreasing(np.arange(len(sources)), sources, targets, 64, cancel)
  # Placing all 2M pairs lasts far longer.
  assert time.perf_counter() - cancelled_at[0] < 1.0


@pytest.mark.slow
def test_a_packed_batch_has_the_loss_and_gradients_of_its_pairs_unpacked():
  cfg = tiny_config(vocab_size=50, max_len=32)
  module, params = Transformer(cfg), init_params(cfg)
  rng = np.random.default_rng(1)
  split = _split(rng, count=40)
  packed = Batcher(split, max_length=32, tokens_per_batch=512, pack_length=32)
  unpacked = Batcher(split, max_length=32, tokens_per_batch=4096)
  [(length, indices)] = [b for b in packed.plan(seed=0) if (b[1] >= 0).sum(1).max() > 1][:1]
  pairs = np.sort(indices[indices >= 0])
  batch = packed.assemble(length, indices)
  alone = unpacked.assemble(32, pairs)

  def total(params, batch):
    logits = module.apply({'params': params}, batch['inputs'], batch['decoder_inputs'],
                         batch.get('source_segments'), batch.get('target_segments'))
    return loss.loss_sums(logits, batch['targets'], 0.1)['loss']

  def fused_total(params, batch):  # train.loss_chunk 5
    return module.apply({'params': params}, batch['inputs'], batch['decoder_inputs'],
                       batch['targets'], 0.1, 5, batch.get('source_segments'),
                       batch.get('target_segments'), method='fused_loss_sums')['loss']

  expected, expected_grads = jax.jit(jax.value_and_grad(total))(params, alone)
  for packed_total in (total, fused_total):
    value, grads = jax.jit(jax.value_and_grad(packed_total))(params, batch)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    # float32 sums in another order: each element within 1e-4 of itself, or within 1e-6 of
    # its array's largest element (a gradient summed over the whole batch).
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        a, b, rtol=1e-4, atol=1e-6 * np.abs(b).max()), grads, expected_grads)


@pytest.mark.slow
def test_training_on_packed_batches(tmp_path):
  config = train_config(**{'data.pack_length': 32,
                           'train.num_train_steps': 3, 'train.log_every_steps': 1,
                           'train.eval_every_steps': 3, 'train.num_eval_steps': 1,
                           'train.eval_bleu': False, 'train.checkpoint_every_steps': 3})
  metrics = train_loop.train_and_evaluate(config, str(tmp_path / 'run'))
  losses = [r['loss'] for r in metrics_log.read(str(tmp_path / 'run' / 'metrics.jsonl'))
            if r['split'] == 'train']
  assert len(losses) == 3 and all(np.isfinite(losses))
  assert np.isfinite(metrics['perplexity'])  # the dev split, unpacked
