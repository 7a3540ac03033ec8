"""Scaled dot-product and multi-head attention (§3.2).

Shapes use b = batch, q = query length, k = key length, h = num_heads.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model.dropout import Dropout
from transformer_jax.model.model_config import TransformerConfig

# Weight matrices that tensor2tensor creates without an initialiser of their own (all but the
# embedding matrix) get its model-wide default, Glorot-uniform ("uniform_unit_scaling", gain 1).
glorot_uniform = nn.initializers.xavier_uniform()


# On a CPU, the decoder's self-attention cache is kept in blocks of this many positions, so
# that a decoding step reads the blocks written so far and no others, choosing them by a branch
# (see `MultiHeadAttention._attend_step`). Elsewhere it is one block, read whole at every step
# with no branch: the blocks are a CPU measure, measured on CPUs only.
CACHE_BLOCK = 16


def cache_blocks(length: int) -> list[tuple[int, int]]:
  """The (first, end) positions of each block of a `length`-position decoding cache."""
  size = CACHE_BLOCK if jax.default_backend() == 'cpu' else length
  return [(first, min(first + size, length)) for first in range(0, length, size)]


@dataclasses.dataclass(frozen=True)
class DecodeStep:
  """A call of incremental decoding (`MultiHeadAttention`'s `step`): the one new input of every
  hypothesis is at `position`, and the hypotheses come `copies` to a source sentence,
  consecutively (beam search's; 1 for greedy decoding)."""

  position: jax.Array | int
  copies: int


# The layouts of the decoding cache, (n, k, h, d) -> the operands' layouts in the products of
# eq. (1): keys (n, h, d_k, k), values (n, h, k, d_v), so that a step never transposes it.
_CACHE_LAYOUT = {'key': (0, 2, 3, 1), 'value': (0, 2, 1, 3)}


def _to_cache(name: str, x: jax.Array) -> jax.Array:
  return jnp.transpose(x, _CACHE_LAYOUT[name])


def fused_glorot_uniform(fused_width: int) -> nn.initializers.Initializer:
  """Glorot-uniform for one block of a wider matrix: a (fan_in, fan_out) kernel drawn from
  U(-a, a), a = sqrt(6 / (fan_in + fused_width)), as if it were `fused_width` columns of a
  single (fan_in, fused_width) Glorot-uniform matrix.

  tensor2tensor v1 (the paper's code) computed Q, K and V of a self-attention with one
  (d_model, 2·h·d_k + h·d_v) projection, and K, V of the encoder-decoder attention with one
  (d_model, h·d_k + h·d_v) projection; splitting that matrix gives these blocks. At
  h·d_k = h·d_v = d_model the self-attention variance is 1/(2·d_model), half that of a
  separate Glorot-uniform W^Q (fairseq draws the same variance with gain 1/sqrt(2)).
  """

  def init(key, shape, dtype=jnp.float32):
    fan_in, fan_out = shape  # DenseGeneral flattens its kernel to two dimensions first
    scale = (fan_in + fan_out) / (fan_in + fused_width)
    return nn.initializers.variance_scaling(scale, 'fan_avg', 'uniform')(key, shape, dtype)

  return init


def padding_mask(valid: jax.Array) -> jax.Array:
  """Key mask from a (b, k) boolean array of real (non-pad) positions: (b, 1, 1, k)."""
  return valid[:, None, None, :]


def causal_mask(length: int) -> jax.Array:
  """Decoder self-attention mask (§3.2.3): query i may attend to keys 0..i. (1, 1, q, q)."""
  return jnp.tril(jnp.ones((length, length), jnp.bool_))[None, None]


def segment_mask(query_segments: jax.Array, key_segments: jax.Array) -> jax.Array:
  """Mask of packed sequences, several sentences per sequence: (b, q) and (b, k) segment ids, 0 on
  padding -> (b, 1, q, k), True where the key is real and in the query's own sentence."""
  same = query_segments[:, :, None] == key_segments[:, None, :]
  return (same & (key_segments != 0)[:, None, :])[:, None]


def segment_positions(segments: jax.Array) -> jax.Array:
  """(b, length) segment ids -> each token's position within its own sentence (from 0)."""
  index = jnp.arange(segments.shape[1])[None, :]
  starts = jnp.concatenate([jnp.ones_like(segments[:, :1], jnp.bool_),
                            segments[:, 1:] != segments[:, :-1]], axis=1)
  return index - jax.lax.cummax(jnp.where(starts, index, 0), axis=1)


def dot_product_attention(query, key, value, mask, dropout: nn.Module):
  """Eq. (1): softmax(Q K^T / sqrt(d_k)) V, per head.

  Args:
    query: (b, q, h, d_k).
    key: (b, k, h, d_k).
    value: (b, k, h, d_v).
    mask: boolean, broadcastable to (b, h, q, k); False marks an illegal connection.
    dropout: applied to the attention weights (identity at rate 0, the paper's setting).

  Returns:
    (b, q, h, d_v), and the attention weights softmax(Q K^T / sqrt(d_k)) (b, h, q, k) before
    dropout. Q is scaled by 1/sqrt(d_k) in its own dtype (exact in bfloat16 when d_k is a
    power of 4, as base's 64; rounded to bfloat16 otherwise); the products Q K^T accumulate
    in float32 and the softmax is computed in float32. Illegal connections get the most
    negative float32 instead of -inf, so a query with no legal key (a row of an all-pad
    sequence) averages the values instead of producing NaN.
  """
  query = query * jnp.asarray(query.shape[-1] ** -0.5, query.dtype)
  scores = jnp.einsum('bqhd,bkhd->bhqk', query, key, preferred_element_type=jnp.float32)
  scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(scores, axis=-1)
  return jnp.einsum('bhqk,bkhd->bqhd', dropout(weights).astype(value.dtype), value), weights


def fused_attention(query, key, value, mask, implementation: str):
  """Eq. (1) by `jax.nn.dot_product_attention` ('xla' or 'cudnn'), the same arguments and
  output as `dot_product_attention` with d_k = d_v and no dropout on the weights, which it
  does not return. The mask goes in whole (cuDNN turns it into a bias)."""
  mask = jnp.broadcast_to(mask, (*mask.shape[:2], query.shape[1], key.shape[1]))
  return jax.nn.dot_product_attention(query, key, value, mask=mask,
                                      implementation=implementation)


def attention_over_blocks(query, keys, values, mask):
  """Eq. (1) as `dot_product_attention`, over keys and values given as blocks of positions in
  the cache layouts: query (n, q, h, d_k); keys [(n, h, d_k, k_i)]; values [(n, h, k_i, d_v)];
  mask broadcastable to (n, h, q, sum k_i). The scores of all blocks share one softmax; each
  block's values are weighted by their own share of it. No step reads the cache through a
  copy. Returns (n, q, h, d_v) and the weights (n, h, q, sum k_i)."""
  # Heads-major (n, h, q, d) operands and results: the batched products' layout that XLA's
  # CPU backend runs best at decoding's shapes
  # (experiments/decoding/README.md).
  query = jnp.swapaxes(query * jnp.asarray(query.shape[-1] ** -0.5, query.dtype), 1, 2)
  scores = jnp.concatenate([jnp.einsum('nhqd,nhdk->nhqk', query, key,
                                       preferred_element_type=jnp.float32) for key in keys], -1)
  weights = jax.nn.softmax(jnp.where(mask, scores, jnp.finfo(jnp.float32).min), axis=-1)
  ends = np.cumsum([value.shape[2] for value in values])
  shares = jnp.split(weights.astype(values[0].dtype), ends[:-1], axis=-1)
  heads = sum(jnp.einsum('nhqk,nhkd->nhqd', share, value, preferred_element_type=jnp.float32)
              for share, value in zip(shares, values))  # summed in float32, rounded once
  return jnp.swapaxes(heads, 1, 2).astype(values[0].dtype), weights


class MultiHeadAttention(nn.Module):
  """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O (§3.2.2), each head by eq. (1).

  W^Q, W^K (d_model, h, d_k), W^V (d_model, h, d_v) and W^O (h, d_v, d_model) are the paper's
  matrices with the heads split out (for sharding). Options honoured: `attention_bias` (a
  bias on every projection; off, as in the paper's equations), `qkv_init` ('fused': W^Q, W^K,
  W^V drawn as blocks of tensor2tensor v1's fused projections, `fused_glorot_uniform`;
  'separate': each Glorot-uniform on its own shape; W^O always the latter),
  `attention_dropout_rate` and `drophead_rate` (beyond the paper, default off) and
  `attention_impl`.

  With `step` (a `DecodeStep`), incremental decoding: keys and values are kept in the 'cache'
  collection, created by the first such call; later calls take one new position per hypothesis
  (q = 1). The weights (b, h, q, k) are sown as 'intermediates'/'attention_weights'; while
  decoding, those of the encoder-decoder attention only, (n, h, copies·q, k), the `copies`
  hypotheses of each of n sentences as its queries.
  """

  config: TransformerConfig
  encoder_decoder: bool = False  # keys and values come from the encoder output

  @nn.compact
  def __call__(self, inputs_q: jax.Array, inputs_kv: jax.Array, mask: jax.Array,
               step: DecodeStep | None = None) -> jax.Array:
    """inputs_q: (b, q, d_model); inputs_kv: (b, k, d_model); mask as in dot_product_attention
    -> (b, q, d_model) in the compute dtype."""
    cfg = self.config
    # The widths of tensor2tensor v1's fused projections that W^Q, W^K and W^V belong to.
    if self.encoder_decoder:
      fused = {'query': cfg.num_heads * cfg.d_k, 'key': cfg.num_heads * (cfg.d_k + cfg.d_v)}
      fused['value'] = fused['key']
    else:
      fused = dict.fromkeys(('query', 'key', 'value'), cfg.num_heads * (2 * cfg.d_k + cfg.d_v))

    def projection(depth, name):
      # A bias only with `attention_bias`, as tensor2tensor v1's convolutions and fairseq have.
      kernel_init = (fused_glorot_uniform(fused[name]) if cfg.qkv_init == 'fused'
                     else glorot_uniform)
      return nn.DenseGeneral(
          features=(cfg.num_heads, depth),
          use_bias=cfg.attention_bias,
          dtype=cfg.dtype,
          param_dtype=cfg.param_dtype,
          kernel_init=nn.with_logical_partitioning(kernel_init, ('embed', 'heads', 'kv')),
          bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ('heads', 'kv')),
          name=name,
      )

    def keys_values():
      return projection(cfg.d_k, 'key')(inputs_kv), projection(cfg.d_v, 'value')(inputs_kv)

    query = projection(cfg.d_k, 'query')(inputs_q)
    if step is not None and self.encoder_decoder:
      heads, weights = self._attend_to_cached_source(query, keys_values, mask)
    elif step is not None and self.has_variable('cache', 'key'):
      heads, weights = self._attend_step(query, *keys_values(), mask, step)
    else:
      key, value = keys_values()
      if step is not None:
        self._create_cache(key, value, step.copies)
      if cfg.attention_impl != 'explicit' and not self.is_mutable_collection('intermediates'):
        heads, weights = fused_attention(query, key, value, mask, cfg.attention_impl), None
      else:
        # Dropout on the weights: tensor2tensor's later versions (the paper has none).
        attention_dropout = Dropout(cfg.attention_dropout_rate,
                                    deterministic=cfg.deterministic)
        heads, weights = dot_product_attention(query, key, value, mask, attention_dropout)
    heads = heads.reshape(query.shape[0], -1, *heads.shape[2:])
    # Kept only when applied with mutable=['intermediates'] (see `visualize`, which therefore
    # always gets eq. (1) written out); otherwise a no-op and the weights cost nothing beyond
    # the softmax itself.
    self.sow('intermediates', 'attention_weights', weights)
    # DropHead: whole heads dropped per example, survivors scaled by 1/(1-p), at a constant
    # rate rather than the DropHead paper's V-shaped schedule.
    heads = Dropout(cfg.drophead_rate, broadcast_dims=(1, 3))(
        heads, deterministic=cfg.deterministic)
    return nn.DenseGeneral(
        features=cfg.d_model,
        axis=(-2, -1),
        use_bias=cfg.attention_bias,
        dtype=cfg.dtype,
        param_dtype=cfg.param_dtype,
        kernel_init=nn.with_logical_partitioning(glorot_uniform, ('heads', 'kv', 'embed')),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ('embed',)),
        name='out',
    )(heads)

  def _attend_to_cached_source(self, query, keys_values, mask):
    """Encoder-decoder attention (§3.2.3) while decoding: the keys and values of the encoder
    output (`keys_values()`) are computed when the cache is created, once per sentence,
    (n, h, s, d) for n source sentences, and the `copies` hypotheses of a sentence attend to them
    together, as `copies` queries of one sentence."""
    if not self.has_variable('cache', 'key'):
      for name, x in zip(('key', 'value'), keys_values()):
        self.put_variable('cache', name, _to_cache(name, x))
    key, value = (self.get_variable('cache', name) for name in ('key', 'value'))
    # (n·copies, q) -> (n, copies·q)
    query = query.reshape(key.shape[0], -1, *query.shape[2:])
    return attention_over_blocks(query, [key], [value], mask)

  def _create_cache(self, key, value, copies):
    """The self-attention cache, zeros, for as many positions as `key` and `value` (b, t, h, d)
    hold: per name a tuple of blocks (`cache_blocks`) of k positions, `copies` copies each, keys
    (n, h, d_k, k·copies) and values (n, h, k·copies, d_v): the layouts
    the products of eq. (1) read, so that a step never transposes the cache."""
    hypotheses = key.shape[0]
    for name, x in (('key', key), ('value', value)):
      _, length, heads, depth = x.shape
      self.put_variable('cache', name, tuple(
          _to_cache(name, jnp.zeros((hypotheses // copies, (end - first) * copies, heads, depth),
                                    x.dtype))
          for first, end in cache_blocks(length)))

  def _attend_step(self, query, key, value, mask, step):
    """A step of self-attention while decoding: each hypothesis's new key and value (one
    position) go into its copy of the cache, and its query attends over the blocks so far.

    Copy j of position t holds the key written by the hypothesis that was its sentence's j-th
    at step t; `mask` (n, 1, copies, length·copies), built by the decoder from its `history`,
    picks each hypothesis's copy at each earlier position."""
    # Beam search reorders hypotheses, so a hypothesis's history lies in any of its sentence's
    # copies; the mask picks it out and no step moves the cache (FasterTransformer's "cache
    # indirection").
    spans = cache_blocks(mask.shape[-1] // step.copies)  # each block's (first, end) position
    stored, block_now = {}, step.position // spans[0][1]  # all blocks but the last one size
    for name, new in (('key', key), ('value', value)):
      # Position t of copy j is entry (t - first)·copies + j of the block whose first
      # position is `first`: a step writes one contiguous run of entries, in place, into the
      # block of its position (a branch a block, the others passing their blocks through).
      axis, blocks = _CACHE_LAYOUT[name].index(1), []
      new = _to_cache(name, new.reshape(-1, step.copies, *new.shape[2:]))

      def write(block, offset):
        return jax.lax.dynamic_update_slice_in_dim(block, new, offset, axis)

      for i, (block, (first, _)) in enumerate(zip(self.get_variable('cache', name), spans)):
        offset = (step.position - first) * step.copies
        blocks.append(write(block, offset) if len(spans) == 1 else jax.lax.cond(
            block_now == i, write, lambda block, _: block, block, offset))
      stored[name] = tuple(blocks)
      self.put_variable('cache', name, stored[name])
    # The hypotheses of a sentence are its queries: (n·copies, 1) -> (n, copies).
    query = query.reshape(query.shape[0] // step.copies, -1, *query.shape[2:])

    def attend(block):
      # Blocks 0 ... block only, so a step costs what the output so far costs, not what the
      # longest output could: one branch a block, the rest of the step compiled once.
      def branch(query, keys, values, mask):
        return attention_over_blocks(query, keys[:block + 1], values[:block + 1],
                                     mask[..., :spans[block][1] * step.copies])[0]
      return branch

    # One block (off a CPU): `switch` calls its one branch, no conditional.
    heads = jax.lax.switch(block_now, [attend(block) for block in range(len(spans))],
                           query, stored['key'], stored['value'], mask)
    return heads, None
