"""Decoding a batch of source token ids with a Transformer: greedy or beam search (§6.1).

  outputs = batch_decode.decode(module, params, inputs, beam_size=4, alpha=0.6, max_extra_length=50)

`module` must be deterministic (dropout off). The source is encoded once. The incremental
decoder (the default) then keeps a key/value cache: the encoder-decoder attention keys and
values are computed once per sentence and each decoder self-attention appends one position
per step, so a step computes one new position, attending over the blocks of the cache written
so far (on a CPU, attention.CACHE_BLOCK positions each). Beam search never moves the cache: it
reorders a small table that says where each hypothesis's history lies (see `transformer.Decoder`).
Both searches drop the sentences they have finished as they go (`widths`). `cached=False`
re-runs the decoder over the whole output buffer at every step instead: the reference the
cache is tested and timed against.
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding import search
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.model.transformer import Transformer


def _per_hypothesis(tree: Any, copies: int) -> Any:
  """Each sentence's entry of every leaf with a leading batch axis, `copies` times (one per
  hypothesis, sentence-major)."""
  return jax.tree.map(lambda x: jnp.repeat(x, copies, axis=0) if x.ndim else x, tree)


def _next_logits(logits: jax.Array) -> jax.Array:
  """The next token's logits, (hypotheses, vocab) float32, as a `search.Scorer` gives them. PAD_ID
  is the decoder's start symbol, never a target, so it is excluded from the outputs."""
  return logits.at[:, PAD_ID].set(-jnp.inf)


def _take_parents(x: jax.Array, parents: jax.Array) -> jax.Array:
  return jnp.take(x, parents, axis=0) if x.ndim else x


def _init_cache(module: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                length: int, copies: int):
  _, variables = module.apply({'params': params}, encoded, source_mask, length, copies,
                             method='init_cache', mutable=['cache'])
  # The barrier keeps XLA from moving the encoder-decoder keys and values out of the cache's
  # layout (which it does to cancel transposes at creation, and then transposes every step).
  return jax.lax.optimization_barrier(variables['cache'])


def _cached_step(module: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                 cache, tokens: jax.Array, i: jax.Array):
  logits, variables = module.apply({'params': params, 'cache': cache}, encoded, source_mask,
                                  tokens[:, None], incremental=True, position=i,
                                  method='decode', mutable=['cache'])
  return _next_logits(logits[:, 0]), variables['cache']


def _reorder_cache(cache, parents: jax.Array):
  # The cached keys and values stay where they were written; a hypothesis takes over the
  # table of copies that holds its history (see `transformer.Decoder`).
  decoder = dict(cache['decoder'], history=_take_parents(cache['decoder']['history'], parents))
  return dict(cache, decoder=decoder)


def _init_inputs(module: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                 length: int, copies: int) -> jax.Array:
  del module, params, source_mask
  return jnp.full((encoded.shape[0] * copies, length), PAD_ID, jnp.int32)


def _uncached_step(module: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                   decoder_inputs: jax.Array, tokens: jax.Array, i: jax.Array):
  # Every step runs the decoder over all `length` positions.
  copies = tokens.shape[0] // encoded.shape[0]
  encoded, source_mask = _per_hypothesis((encoded, source_mask), copies)
  decoder_inputs = decoder_inputs.at[:, i].set(tokens)
  logits = module.apply({'params': params}, encoded, source_mask, decoder_inputs,
                       method='decode')
  return _next_logits(logits[:, i]), decoder_inputs


# A scorer's state, from (module, params, encoded, source_mask, length, copies); its step, from
# (module, params, encoded, source_mask, state, tokens, i); its reorder (`search.Scorer`): with
# the decoder's key/value cache (True), or re-running the decoder over the whole output (False).
_SCORERS = {True: (_init_cache, _cached_step, _reorder_cache),
            False: (_init_inputs, _uncached_step, _take_parents)}


def _keep_sentences(state: Any, sentences: jax.Array, count: int) -> Any:
  """`search.KeepFn` for a state whose every leaf has an entry or several (`copies`,
  sentence-major) for each of `count` sentences: those of `sentences` only."""

  def keep(x):
    per_sentence = x.reshape(count, -1, *x.shape[1:])
    return jnp.take(per_sentence, sentences, axis=0).reshape(-1, *x.shape[1:])

  return jax.tree.map(keep, state)


def model_scorer(module: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                 length: int, copies: int, cached: bool = True) -> search.Scorer:
  """A scorer of outputs up to `length` tokens, `copies` hypotheses per sentence, with the decoder's
  key/value cache or (`cached=False`) re-running the decoder over all `length` positions at
  every step. Its state holds the sentences' encoded sources and masks, which the sentences
  dropped as they end (`search.Scorer.keep`) take with them."""
  init, step, reorder = _SCORERS[cached]

  def step_sentences(state, tokens, i):
    logits, decoder = step(module, params, state['encoded'], state['source_mask'],
                           state['decoder'], tokens, i)
    return logits, dict(state, decoder=decoder)

  def reorder_hypotheses(state, parents):
    return dict(state, decoder=reorder(state['decoder'], parents))

  def keep(state, sentences):
    # The barrier as `_init_cache`'s: the cache kept in its layout.
    return jax.lax.optimization_barrier(
        _keep_sentences(state, sentences, state['source_mask'].shape[0]))

  state = {'encoded': encoded, 'source_mask': source_mask,
           'decoder': init(module, params, encoded, source_mask, length, copies)}
  return search.Scorer(state, step_sentences, reorder_hypotheses, keep)


def runs_scorer(module: Transformer, params, encoded: jax.Array, source_mask: jax.Array,
                length: int, copies: int, cached: bool = True) -> search.Scorer:
  """`model_scorer` of several runs of `module`: their parameters and encoded sources stacked on a
  leading run axis, their hypotheses run-major (run r's are hypotheses r·n·copies ... of n
  sentences). The
  module is vmapped over the runs, step by step; the search is not, so a step's position stays
  one number for every run (and a step reads only the cache blocks it needs)."""
  init, step, reorder = _SCORERS[cached]
  runs = encoded.shape[0]
  state = jax.vmap(lambda p, e: init(module, p, e, source_mask, length, copies))(params, encoded)

  def step_runs(state, tokens, i):
    logits, state = jax.vmap(lambda p, e, s, t: step(module, p, e, source_mask, s, t, i))(
        params, encoded, state, tokens.reshape(runs, -1))
    return logits.reshape(-1, logits.shape[-1]), state

  def reorder_runs(state, parents):
    parents = parents.reshape(runs, -1)  # a parent is of its sentence, so of its run
    return jax.vmap(reorder)(state, parents - jnp.arange(runs)[:, None] * parents.shape[1])

  return search.Scorer(state, step_runs, reorder_runs)


# A search's batch goes on at 1/NARROWING of its width once no more than that many of its sentences
# are still searching (`widths`), where those are at least FEWEST_SENTENCES and split over the
# batch's shards: a batch's last sentences are the few with its longest outputs, and a step's cost
# is close to proportional to its hypotheses down to about 16 of them. Once only, and not for a
# bucket's small last batch: each width is one more loop to compile, about as long to compile as the
# rest of the program (experiments/decoding_vs_ct2/README.md).
NARROWING, FEWEST_SENTENCES = 4, 16


def widths(sentences: int, shards: int = 1) -> tuple[int, ...]:
  """The sentences a search of `sentences` runs at once as they end (`search.greedy`'s
  `widths`): all, then 1/NARROWING of them where that many are at least FEWEST_SENTENCES and
  split over the batch's `shards`."""
  narrow = sentences // NARROWING
  if sentences % (NARROWING * shards) == 0 and narrow >= FEWEST_SENTENCES:
    return sentences, narrow
  return (sentences,)


def decode(module: Transformer, params, inputs: jax.Array, *, beam_size: int, alpha: float,
           max_extra_length: int, cached: bool = True, stacked: bool = False, shards: int = 1
           ) -> jax.Array:
  """inputs: (b, s) source ids -> (b, s + max_extra_length) output ids, PAD_ID after EOS;
  with `stacked`, the parameters of several runs stacked on a leading axis -> (b, runs,
  s + max_extra_length), every run's outputs searched together (`runs_scorer`).

  beam_size 1 is greedy decoding (α unused), larger sizes beam search, as in tensor2tensor.
  The output may hold s + max_extra_length tokens (§6.1: input length + 50, with the padded
  input length as in tensor2tensor). All-padding sources give empty outputs. Unless `stacked`, the
  sentences that are done are dropped as the search goes where `widths` narrows the batch, each
  width a number of sentences that splits over the batch's `shards`.
  """
  length = inputs.shape[1] + max_extra_length
  source_mask = inputs != PAD_ID
  encode = lambda p: module.apply({'params': p}, inputs, source_mask, method='encode')
  if stacked:
    runs, searched = jax.tree.leaves(params)[0].shape[0], ()
    scorer = runs_scorer(module, params, jax.vmap(encode)(params), source_mask, length,
                         beam_size, cached)
  else:
    runs, searched = 1, widths(inputs.shape[0], shards)
    scorer = model_scorer(module, params, encode(params), source_mask, length, beam_size, cached)
  active = jnp.tile(jnp.any(source_mask, axis=1), runs)
  if beam_size == 1:
    outputs = search.greedy(scorer, length, active, searched)
  else:
    outputs = search.beam_search(scorer, beam_size, alpha, length, active, searched)[0]
  if stacked:
    return jnp.moveaxis(outputs.reshape(runs, inputs.shape[0], length), 0, 1)
  return outputs


def strip(tokens: np.ndarray) -> list[int]:
  """One output's ids up to (not including) its first EOS or padding."""
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
  length): every run decodes the batch in one program (`decode`). One function per
  model and settings (`ShardedModel.program`)."""

  def make():
    params_sharding = stacked_params_sharding(model) if stacked else model.param_sharding
    # Stacked: sentences first, runs second, so that the batch axis stays the one the mesh
    # splits.
    return jax.jit(functools.partial(decode, model.eval_module, beam_size=beam_size, alpha=alpha,
                                     max_extra_length=max_extra_length, cached=cached,
                                     stacked=stacked, shards=model.batch_shards),
                   in_shardings=(params_sharding, model.batch_sharding),
                   out_shardings=model.batch_sharding)

  return model.program(('decode', beam_size, alpha, max_extra_length, cached, stacked), make)


def stacked_params_sharding(model: ShardedModel):
  """Where the parameters of several runs of `model`, stacked on a leading axis, live."""
  return jax.tree.map(sharding.stacked, model.param_sharding)
