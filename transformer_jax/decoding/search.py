"""Greedy decoding and beam search (§6.1), independent of the model.

A `Scorer` supplies the next token's logits one position at a time; the search algorithms below
run entirely inside `lax.while_loop`s, so a jitted search compiles once per input shape.
`batch_decode.py` builds scorers from a Transformer (with or without a key/value cache); tests
build them from hand-written tables.

Hypotheses are laid out sentence-major: with `copies` hypotheses per sentence, hypothesis r belongs
to sentence r // copies. Given `widths`, a search drops the sentences that are done as it goes: it
runs the batch at each width in turn (a loop each), moving on once no more than the next width are
still searching, when it keeps those only (`Scorer.keep`), as CTranslate2 drops each sentence as it
ends: the later steps compute fewer hypotheses, and a sentence's result is the same.
"""

import dataclasses
import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID

# step(state, tokens, i) -> (logits, state): tokens (hypotheses,) are the inputs at position i
# (PAD_ID, the start symbol, at i = 0); logits (hypotheses, vocab) float32 are those of the token at
# position i, whose log-softmax is its log-probabilities (-inf where it is never produced).
StepFn = Callable[[Any, jax.Array, jax.Array], tuple[jax.Array, Any]]
# reorder(state, parents) -> state with hypothesis r taken from hypothesis parents[r].
ReorderFn = Callable[[Any, jax.Array], Any]
# keep(state, sentences) -> the state of those sentences only (indices into the current ones),
# in that order, each with its hypotheses.
KeepFn = Callable[[Any, jax.Array], Any]


@dataclasses.dataclass(frozen=True)
class Scorer:
  """The next token's logits, one position at a time: `step` from `state`, `reorder` to
  follow the hypotheses that beam search keeps, and `keep` (needed by a search given more than
  one width) to drop the sentences that are done."""

  state: Any
  step: StepFn
  reorder: ReorderFn
  keep: KeepFn | None = None


def _loop(scorer: Scorer, length: int, widths: Sequence[int], step, carry):
  """Runs `step` from `carry` = (i, sentences, done, state) while i < `length` and a sentence
  is not done; returns `sentences` (a tree of arrays, one entry a sentence) as each ended, an
  entry for every sentence of the batch, in order.

  One `lax.while_loop` per width of `widths` (the first the batch's; empty: the batch's only):
  the batch goes on at the next width, its sentences not done first, once no more than that
  many are still searching."""
  results = carry[1]
  batch = carry[2].shape[0]
  searched = jnp.arange(batch)  # the batch's sentence of each one searched
  widths = tuple(widths) or (batch,)
  if widths[0] != batch or (len(widths) > 1 and scorer.keep is None):
    raise ValueError(f'widths {widths}: the first must be the batch\'s sentences, {batch}, '
                     'and more than one needs a Scorer with keep')
  for following in (*widths[1:], 0):

    def running(c, following=following):
      i, _, done, _ = c
      return (i < length) & (jnp.sum(~done) > following)

    carry = jax.lax.while_loop(running, step, carry)
    i, sentences, done, state = carry
    results = jax.tree.map(lambda result, x: result.at[searched].set(x), results, sentences)
    if following:
      kept = jnp.argsort(done, stable=True)[:following]  # those still searching first
      carry = (i, jax.tree.map(lambda x: x[kept], sentences), done[kept],
               scorer.keep(state, kept))
      searched = searched[kept]
  return results


def length_penalty(length: jax.Array, alpha: float) -> jax.Array:
  """lp(Y) = ((5 + |Y|) / 6)^α (Wu et al., 2016), which §6.1 uses with α = 0.6."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def first_argmax(scores: jax.Array) -> jax.Array:
  """`jnp.argmax(scores, axis=-1)` (the first of equal maxima), as the maximum and then the
  least index that holds it, the indices counted in float32 (exact up to 2^24): XLA's CPU
  backend compiles argmax to a reduction over (value, index) pairs, several times slower, and
  takes a float32 minimum faster than an int32 one (experiments/decoding_vs_ct2/README.md)."""
  length = scores.shape[-1]
  if length > 2 ** 24:
    raise ValueError(f'{length} scores a row: more than float32 counts exactly (2^24)')
  peak = jnp.max(scores, axis=-1, keepdims=True)
  index = jnp.arange(length, dtype=jnp.float32)
  return jnp.min(jnp.where(scores == peak, index, float(length)), axis=-1).astype(jnp.int32)


def top_k(x: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
  """`lax.top_k(x, n)` over the last axis, exactly, ties included (the lower index first), with
  fewer values sorted: each row is cut into blocks of about sqrt(length / n), and its top n lie
  in the n blocks whose maxima rank first (a block ranked as its first maximum: by value, then
  index), so only those blocks' values are sorted, with the blocks' maxima."""
  *lead, length = x.shape
  ideal = math.sqrt(length / n)
  # A block size that divides the row, if one lies near the ideal: no padded copy of the row.
  size = min(range(max(1, math.ceil(ideal / 2)), math.floor(2 * ideal) + 1),
             key=lambda size: (length % size != 0, abs(size - ideal)), default=1)
  count = -(-length // size)
  if count <= n:
    return jax.lax.top_k(x, n)
  padding = [(0, 0)] * len(lead) + [(0, count * size - length)]  # after every value: never first
  row = jnp.pad(x, padding, constant_values=-jnp.inf)
  _, chosen = jax.lax.top_k(jnp.max(row.reshape(*lead, count, size), axis=-1), n)
  chosen = jnp.sort(chosen, axis=-1)  # in the row's order, so that ties still go to the lower index
  # The chosen blocks' values, taken from the row by their indices: XLA's CPU backend does this
  # faster than taking whole blocks of the row cut into blocks (experiments/decoding_vs_ct2).
  indices = (chosen[..., None] * size + jnp.arange(size)).reshape(*lead, n * size)
  best, where = jax.lax.top_k(jnp.take_along_axis(row, indices, axis=-1), n)
  return best, jnp.take_along_axis(indices, where, axis=-1)


def top_of_beams(live_log_probs: jax.Array, logits: jax.Array, n: int
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The top n of beam search's candidates, each live hypothesis's log-probability plus a
  token's: `lax.top_k` of live_log_probs[b, j] + log_softmax(logits)[b·k + j, t] over (j, t),
  exactly (ties: the lower index first): (values, beam j, token t), each (batch, n).
  live_log_probs: (batch, k); logits: (batch·k, vocab).

  A beam's log-softmax is its logits less one number, an order kept, so a beam's top n are its
  logits' top n, and only theirs are normalised (as `jax.nn.log_softmax` computes it) and added
  to the beam's log-probability: k top-n of vocab, then one of n out of k·n, and no
  log-probability written for every token. Candidates at -inf (of a beam at -inf, never
  returned) may come in another order than `lax.top_k`'s."""
  batch, k = live_log_probs.shape
  per_beam = min(n, logits.shape[-1])
  peak = jnp.max(logits, axis=-1, keepdims=True)
  log_total = jnp.log(jnp.sum(jnp.exp(logits - peak), axis=-1, keepdims=True))
  values, tokens = top_k(logits, per_beam)  # (batch·k, per_beam), each beam's best
  values = live_log_probs.reshape(-1, 1) + ((values - peak) - log_total)
  best, where = jax.lax.top_k(values.reshape(batch, k * per_beam), n)
  token = jnp.take_along_axis(tokens.reshape(batch, k * per_beam), where, axis=1)
  return best, where // per_beam, token


def greedy(scorer: Scorer, length: int, active: jax.Array, widths: Sequence[int] = ()
           ) -> jax.Array:
  """The most probable token at every position until EOS (the largest logit: no
  log-softmax).

  Args:
    scorer: one hypothesis per sentence.
    length: the most output tokens (EOS included).
    active: (batch,) bool; inactive sentences (empty inputs) produce nothing.
    widths: the sentences searched at once as they end (see the module's docstring); empty,
      all to the end.

  Returns:
    (batch, length) ids; PAD_ID after EOS.
  """
  batch = active.shape[0]

  def step(carry):
    i, outputs, done, state = carry
    previous = jnp.where(i == 0, PAD_ID, outputs[:, jnp.maximum(i - 1, 0)])
    logits, state = scorer.step(state, previous, i)
    token = jnp.where(done, PAD_ID, first_argmax(logits)).astype(jnp.int32)
    outputs = outputs.at[:, i].set(token)
    return i + 1, outputs, done | (token == EOS_ID), state

  initial = (jnp.zeros((), jnp.int32), jnp.zeros((batch, length), jnp.int32), ~active,
             scorer.state)
  return _loop(scorer, length, widths, step, initial)


def beam_search(scorer: Scorer, beam_size: int, alpha: float, length: int,
                active: jax.Array, widths: Sequence[int] = ()) -> tuple[jax.Array, jax.Array]:
  """Beam search with the length penalty of §6.1, as tensor2tensor's `beam_search.py`.

  Live hypotheses are ranked by log-probability, finished ones (ended by EOS) by
  log-probability / lp(length), the length counting EOS. Each step extends the live beams by
  every token, keeps the best 2k candidates, moves those that end in EOS and rank among the best
  k to the finished set (the best k finished are kept), and continues the best k others. A
  sentence is done once its best finished hypothesis scores at least the best live one's upper
  bound, its log-probability / lp(`length`) (early termination, §6.1). The search stops when every
  sentence is done or at `length` tokens; a sentence with no finished hypothesis then returns
  its best live one.

  Args:
    scorer: `beam_size` hypotheses per sentence, sentence-major.
    beam_size: k.
    alpha: α >= 0 of the length penalty.
    length: the most output tokens (EOS included).
    active: (batch,) bool; inactive sentences (empty inputs) are done from the start.
    widths: the sentences searched at once as they end (see the module's docstring); empty,
      all to the end.

  Returns:
    (batch, length) ids of each sentence's best hypothesis (PAD_ID after EOS), and its score.
  """
  k = beam_size
  minus_inf = jnp.array(-jnp.inf, jnp.float32)
  max_penalty = length_penalty(length, alpha)

  def step(carry):
    i, (live, live_log_probs, finished, finished_scores), done, state = carry
    batch = live.shape[0]  # the sentences searched now
    previous = jnp.where(i == 0, PAD_ID, live[:, :, jnp.maximum(i - 1, 0)]).reshape(-1)
    logits, state = scorer.step(state, previous, i)
    top_log_probs, beam, token = top_of_beams(live_log_probs, logits, 2 * k)  # (batch, 2k)
    sequences = jnp.take_along_axis(live, beam[:, :, None], axis=1).at[:, :, i].set(token)
    ends = token == EOS_ID

    # The candidates that end here and rank among the best k join the finished set: fairseq's
    # rule (tensor2tensor takes all 2k), which makes a beam of one exactly greedy decoding
    # when α = 0.
    scores = top_log_probs / length_penalty(i + 1, alpha)
    scores = jnp.where(ends & (jnp.arange(2 * k) < k), scores, minus_inf)
    finished_scores, best = jax.lax.top_k(jnp.concatenate([finished_scores, scores], 1), k)
    finished = jnp.take_along_axis(jnp.concatenate([finished, sequences], 1), best[:, :, None],
                                   axis=1)

    # The best k that go on; at most k of the 2k candidates end, so k always remain.
    live_log_probs, best = jax.lax.top_k(jnp.where(ends, minus_inf, top_log_probs), k)
    live = jnp.take_along_axis(sequences, best[:, :, None], axis=1)
    parents = jnp.take_along_axis(beam, best, axis=1) + jnp.arange(batch)[:, None] * k
    state = scorer.reorder(state, parents.reshape(-1))

    # Log-probabilities only fall as a hypothesis grows, and lp is largest at the longest
    # output because α >= 0, so no live hypothesis can overtake this bound. Later
    # tensor2tensor's `stop_early` rule, applied per sentence (tensor2tensor stops the batch
    # only when every sentence meets it); its 2017 version waited for the lowest-scoring
    # finished hypothesis to clear the bound, which never happens sooner. Either way the best
    # hypothesis, the one returned, cannot change.
    # Once done, done for good: the bound only falls, the best finished score only rises.
    upper_bound = live_log_probs[:, 0] / max_penalty
    done = done | (finished_scores[:, 0] >= upper_bound)
    return i + 1, (live, live_log_probs, finished, finished_scores), done, state

  # Only the first beam is live at the start, so the first step expands one hypothesis.
  batch = active.shape[0]
  initial_log_probs = jnp.tile(jnp.where(jnp.arange(k) == 0, 0.0, minus_inf), (batch, 1))
  sequences = jnp.zeros((batch, k, length), jnp.int32)
  initial = (jnp.zeros((), jnp.int32),
             (sequences, initial_log_probs, sequences, jnp.full((batch, k), minus_inf)),
             ~active, scorer.state)
  live, live_log_probs, finished, finished_scores = _loop(scorer, length, widths, step, initial)
  any_finished = finished_scores[:, 0] > minus_inf
  best = jnp.where(any_finished[:, None], finished[:, 0], live[:, 0])
  best = jnp.where(active[:, None], best, PAD_ID)
  score = jnp.where(any_finished, finished_scores[:, 0], live_log_probs[:, 0] / max_penalty)
  return best, score
