"""Decoding a batch of source token ids with a Transformer: greedy or beam search (§6.1).

  outputs = batch_decode.decode(model, params, inputs, beam_size=4, alpha=0.6, max_extra_length=50)

`model` must be deterministic (dropout off). The source is encoded once. The incremental
decoder (the default) then keeps a key/value cache: the encoder-decoder attention keys and
values are computed once per sentence and each decoder self-attention appends one position
per step, so a step computes one new position, attending over the blocks of the cache written
so far (the search runs one loop per block of attention.CACHE_BLOCK positions). Beam search
never moves the cache: it reorders a small table that says where each hypothesis's history
lies (see `model.Decoder`). `cached=False` re-runs the decoder over the whole output
buffer at every step instead: the reference the cache is tested and timed against.
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding import search
from transformer_jax.model import attention, partitioning
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.model.transformer import Transformer


def _repeat_rows(tree: Any, copies: int) -> Any:
  """Each row of every leaf with a leading batch axis, `copies` times (sentence-major)."""
  return jax.tree.map(lambda x: jnp.repeat(x, copies, axis=0) if x.ndim else x, tree)


def _next_logits(logits: jax.Array) -> jax.Array:
  """The next token's logits, (rows, vocab) float32, as a `search.Scorer` gives them. PAD_ID is
  the decoder's start symbol, never a target, so it is excluded from the outputs."""
  return logits.at[:, PAD_ID].set(-jnp.inf)


def _take_rows(x: jax.Array, rows: jax.Array) -> jax.Array:
  return jnp.take(x, rows, axis=0) if x.ndim else x


def _keep_sentences(state: Any, sentences: jax.Array, count: int) -> Any:
  """`search.KeepFn` for a state whose every leaf with a leading axis has a row or several
  (`copies`, sentence-major) for each of `count` sentences: those of `sentences` only."""

  def keep(x):
    if not x.ndim:
      return x
    per_sentence = x.reshape(count, -1, *x.shape[1:])
    return jnp.take(per_sentence, sentences, axis=0).reshape(-1, *x.shape[1:])

  return jax.tree.map(keep, state)


def cached_scorer(model: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                  length: int, copies: int) -> search.Scorer:
  """A scorer over the decoder's key/value cache, `copies` rows per sentence; its state the
  cache and the sources' encoding and mask (the sentences dropped as they end drop theirs)."""
  _, variables = model.apply({'params': params}, encoded, source_mask, length, copies,
                             method='init_cache', mutable=['cache'])

  def step(state, tokens, i, bound):
    del i  # the cache holds the position
    # The search runs one loop per cache block; `bound` is the end of the step's block.
    logits, variables = model.apply({'params': params, 'cache': state['cache']},
                                    state['encoded'], state['source_mask'], tokens[:, None],
                                    incremental=True,
                                    cache_block=(bound - 1) // attention.CACHE_BLOCK,
                                    method='decode', mutable=['cache'])
    return _next_logits(logits[:, 0]), dict(state, cache=variables['cache'])

  def reorder(state, rows):
    # The cached keys and values stay where they were written; a hypothesis takes over the
    # table of slots that holds its history (see `model.Decoder`).
    cache = state['cache']
    decoder = dict(cache['decoder'], slots=_take_rows(cache['decoder']['slots'], rows))
    return dict(state, cache=dict(cache, decoder=decoder))

  def keep(state, sentences):
    # The barrier as below: the kept cache in the cache's layout.
    return jax.lax.optimization_barrier(
        _keep_sentences(state, sentences, state['source_mask'].shape[0]))

  # The barrier keeps XLA from moving the encoder-decoder keys and values out of the cache's
  # layout (which it does to cancel transposes at creation, and then transposes every step).
  state = {'cache': variables['cache'], 'encoded': encoded, 'source_mask': source_mask}
  return search.Scorer(jax.lax.optimization_barrier(state), step, reorder,
                       bounds=tuple(end for _, end in attention.cache_blocks(length)), keep=keep)


def uncached_scorer(model: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                    length: int, copies: int) -> search.Scorer:
  """A scorer that re-runs the decoder over all `length` positions at every step; its state
  each row's source encoding and mask and its tokens so far."""
  encoded, source_mask = _repeat_rows((encoded, source_mask), copies)
  decoder_inputs = jnp.full((encoded.shape[0], length), PAD_ID, jnp.int32)

  def step(state, tokens, i, bound):
    del bound  # every step runs the decoder over all `length` positions
    encoded, source_mask, decoder_inputs = state
    decoder_inputs = decoder_inputs.at[:, i].set(tokens)
    logits = model.apply({'params': params}, encoded, source_mask, decoder_inputs,
                         method='decode')
    return _next_logits(logits[:, i]), (encoded, source_mask, decoder_inputs)

  def keep(state, sentences):
    return _keep_sentences(state, sentences, state[0].shape[0] // copies)

  def reorder(state, rows):  # a sentence's rows share its source
    return (*state[:2], _take_rows(state[2], rows))

  return search.Scorer((encoded, source_mask, decoder_inputs), step, reorder, keep=keep)


# A search's batch is halved at most HALVINGS times as its sentences end (`widths`), to no fewer
# than FEWEST_ROWS rows: each width is one more loop per cache block to compile, and below
# these the rows saved save little.
HALVINGS, FEWEST_ROWS = 2, 8


def widths(sentences: int, copies: int, shards: int = 1, halvings: int = HALVINGS
           ) -> tuple[int, ...]:
  """The sentences a search of `sentences`, `copies` rows each, runs at once as they end
  (`search.greedy`'s `widths`): halved up to `halvings` times while the half is a multiple of
  the batch's `shards` and holds at least FEWEST_ROWS rows."""
  result = [sentences]
  while (len(result) <= halvings and result[-1] % (2 * shards) == 0
         and result[-1] // 2 * copies >= FEWEST_ROWS):
    result.append(result[-1] // 2)
  return tuple(result)


def decode(model: Transformer, params, inputs: jax.Array, *, beam_size: int, alpha: float,
           max_extra_length: int, cached: bool = True, shards: int = 1,
           halvings: int = HALVINGS) -> jax.Array:
  """inputs: (b, s) source ids -> (b, s + max_extra_length) output ids, PAD_ID after EOS.

  beam_size 1 is greedy decoding (α unused), larger sizes beam search, as in tensor2tensor.
  The output may hold s + max_extra_length tokens (§6.1: input length + 50, with the padded
  input length as in tensor2tensor). All-padding rows give empty outputs. The sentences that
  are done are dropped as the search goes, the batch halved up to `halvings` times (`widths`;
  0: never), each width a number of sentences that splits over the batch's `shards`.
  """
  length = inputs.shape[1] + max_extra_length
  source_mask = inputs != PAD_ID
  encoded = model.apply({'params': params}, inputs, source_mask, method='encode')
  make_scorer = cached_scorer if cached else uncached_scorer
  active = jnp.any(source_mask, axis=1)
  scorer = make_scorer(model, params, encoded, source_mask, length, beam_size)
  searched = widths(inputs.shape[0], beam_size, shards, halvings)
  if beam_size == 1:
    return search.greedy(scorer, length, active, searched)
  return search.beam_search(scorer, beam_size, alpha, length, active, searched)[0]


def strip(tokens: np.ndarray) -> list[int]:
  """A row of output ids up to (not including) its first EOS or padding."""
  ids = []
  for token in tokens.tolist():
    if token in (EOS_ID, PAD_ID):
      break
    ids.append(token)
  return ids


def jit_decode(model: ShardedModel, beam_size: int, alpha: float, max_extra_length: int,
               cached: bool = True, stacked: bool = False):
  """`decode` with `model`'s deterministic Transformer, jitted on its mesh with parameters and
  batches sharded as in training: (params, inputs) -> outputs. With `stacked`, the parameters of
  several runs of the model stacked on a leading axis (`together`) -> outputs (sentences, runs,
  length): every run decodes the batch in one program, the decoder vmapped. One function per
  model and settings (`ShardedModel.program`)."""

  def make():
    one = functools.partial(decode, model.eval_model, beam_size=beam_size, alpha=alpha,
                            max_extra_length=max_extra_length, cached=cached,
                            shards=model.batch_shards)
    if not stacked:
      return jax.jit(one, in_shardings=(model.param_sharding, model.batch_sharding),
                     out_shardings=model.batch_sharding)
    # Sentences first, runs second: the batch axis stays the one the mesh splits.
    return jax.jit(
        lambda params, inputs: jnp.moveaxis(jax.vmap(one, in_axes=(0, None))(params, inputs),
                                            0, 1),
        in_shardings=(stacked_params_sharding(model), model.batch_sharding),
        out_shardings=model.batch_sharding)

  return model.program(('decode', beam_size, alpha, max_extra_length, cached, stacked), make)


def stacked_params_sharding(model: ShardedModel):
  """Where the parameters of several runs of `model`, stacked on a leading axis, live."""
  return jax.tree.map(partitioning.stacked, model.param_sharding)
