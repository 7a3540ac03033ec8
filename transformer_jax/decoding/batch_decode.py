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


def cached_scorer(model: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                  length: int, copies: int) -> search.Scorer:
  """A scorer over the decoder's key/value cache, `copies` rows per sentence."""
  _, variables = model.apply({'params': params}, encoded, source_mask, length, copies,
                             method='init_cache', mutable=['cache'])

  def step(cache, tokens, i, bound):
    del i  # the cache holds the position
    # The search runs one loop per cache block; `bound` is the end of the step's block.
    logits, variables = model.apply({'params': params, 'cache': cache}, encoded, source_mask,
                                    tokens[:, None], incremental=True,
                                    cache_block=(bound - 1) // attention.CACHE_BLOCK,
                                    method='decode', mutable=['cache'])
    return _next_logits(logits[:, 0]), variables['cache']

  def reorder(cache, rows):
    # The cached keys and values stay where they were written; a hypothesis takes over the
    # table of slots that holds its history (see `model.Decoder`).
    decoder = dict(cache['decoder'], slots=_take_rows(cache['decoder']['slots'], rows))
    return dict(cache, decoder=decoder)

  # The barrier keeps XLA from moving the encoder-decoder keys and values out of the cache's
  # layout (which it does to cancel transposes at creation, and then transposes every step).
  return search.Scorer(jax.lax.optimization_barrier(variables['cache']), step, reorder,
                       bounds=tuple(end for _, end in attention.cache_blocks(length)))


def uncached_scorer(model: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                    length: int, copies: int) -> search.Scorer:
  """A scorer that re-runs the decoder over all `length` positions at every step."""
  encoded, source_mask = _repeat_rows((encoded, source_mask), copies)
  decoder_inputs = jnp.full((encoded.shape[0], length), PAD_ID, jnp.int32)

  def step(decoder_inputs, tokens, i, bound):
    del bound  # every step runs the decoder over all `length` positions
    decoder_inputs = decoder_inputs.at[:, i].set(tokens)
    logits = model.apply({'params': params}, encoded, source_mask, decoder_inputs,
                         method='decode')
    return _next_logits(logits[:, i]), decoder_inputs

  return search.Scorer(decoder_inputs, step, _take_rows)


def decode(model: Transformer, params, inputs: jax.Array, *, beam_size: int, alpha: float,
           max_extra_length: int, cached: bool = True) -> jax.Array:
  """inputs: (b, s) source ids -> (b, s + max_extra_length) output ids, PAD_ID after EOS.

  beam_size 1 is greedy decoding (α unused), larger sizes beam search, as in tensor2tensor.
  The output may hold s + max_extra_length tokens (§6.1: input length + 50, with the padded
  input length as in tensor2tensor). All-padding rows give empty outputs.
  """
  length = inputs.shape[1] + max_extra_length
  source_mask = inputs != PAD_ID
  encoded = model.apply({'params': params}, inputs, source_mask, method='encode')
  make_scorer = cached_scorer if cached else uncached_scorer
  active = jnp.any(source_mask, axis=1)
  if beam_size == 1:
    return search.greedy(make_scorer(model, params, encoded, source_mask, length, 1), length,
                         active)
  scorer = make_scorer(model, params, encoded, source_mask, length, beam_size)
  return search.beam_search(scorer, beam_size, alpha, length, active)[0]


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
                            max_extra_length=max_extra_length, cached=cached)
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
