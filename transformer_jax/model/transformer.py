"""The encoder-decoder Transformer (§3, Figure 1) as pure Flax linen modules.

Parameters live outside the modules:

  module = Transformer(cfg)
  params = module.init(jax.random.key(0), inputs, decoder_inputs)['params']
  logits = module.apply({'params': params}, inputs, decoder_inputs, rngs={'dropout': key})

`inputs` are source token ids (b, s); `decoder_inputs` are the target ids shifted right by one
with PAD_ID (0) in front, tensor2tensor's convention (b, t); logits are (b, t, vocab) float32.
Positions holding PAD_ID in `inputs` are masked out of every attention over the source. The
decoder needs only the causal mask: padding at the end of a target can never be attended to by
an earlier, real position.

Packed sequences (an option of the data pipeline, as tensor2tensor and the Flax examples pack)
hold several sentence pairs each, told apart by `source_segments` (b, s) and
`target_segments` (b, t): 1, 2, ... per pair, 0 on padding. Every attention then stays within
its own pair and positions restart at 0 for each sentence, so a packed pair's logits are those
it has alone in a sequence.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax.model import loss
from transformer_jax.model.attention import (DecodeStep, causal_mask, padding_mask,
                                       segment_mask, segment_positions)
from transformer_jax.data.tokenizer import PAD_ID
from transformer_jax.model.dropout import Dropout
from transformer_jax.model.embeddings import Embeddings, PositionalEncoding
from transformer_jax.model.layers import DecoderLayer, EncoderLayer, normalize
from transformer_jax.model.model_config import TransformerConfig


def _layer_drop(module: nn.Module, cfg: TransformerConfig, x: jax.Array, *args) -> jax.Array:
  """Applies one layer; with LayerDrop (Fan et al., 2019; option, default off) the whole layer
  is skipped with probability `layerdrop_rate` during training."""
  y = split_sequences(cfg, module(x, *args))
  if cfg.deterministic or cfg.layerdrop_rate == 0.0:
    return y
  keep = jax.random.bernoulli(module.make_rng('dropout'), 1.0 - cfg.layerdrop_rate)
  return jnp.where(keep, y, x)


def split_sequences(cfg: TransformerConfig, x: jax.Array) -> jax.Array:
  """x (b, length, d_model) constrained to sequences split as `cfg.axis_rules` split 'batch', the
  other dimensions whole, when a mesh is in context (`ShardedModel.on_mesh`); else x."""
  return nn.with_logical_constraint(x, ('batch', None, None), rules=cfg.axis_rules)


def _prepare(cfg: TransformerConfig, embedded: jax.Array, name: str,
             offset: jax.Array | int = 0, segments: jax.Array | None = None) -> jax.Array:
  """Positional encoding, then dropout on the sum (§3.5, §5.4)."""
  positions = None if segments is None else segment_positions(segments)
  x = PositionalEncoding(cfg, name=name)(embedded, offset, positions)
  return split_sequences(cfg, Dropout(cfg.dropout_rate)(x, deterministic=cfg.deterministic))


class Encoder(nn.Module):
  """A stack of N encoder layers over the embedded source."""

  config: TransformerConfig
  embeddings: Embeddings

  @nn.compact
  def __call__(self, inputs: jax.Array, source_mask: jax.Array,
               segments: jax.Array | None = None) -> jax.Array:
    """inputs: (b, s) ids; source_mask: (b, s) bool, True on real tokens; segments: (b, s) of a
    packed batch -> (b, s, d_model)."""
    cfg = self.config
    x = _prepare(cfg, self.embeddings.embed(inputs, 'source'), 'position', segments=segments)
    mask = padding_mask(source_mask) if segments is None else segment_mask(segments, segments)
    for i in range(cfg.num_layers):
      x = _layer_drop(EncoderLayer(cfg, name=f'layer_{i}'), cfg, x, mask)
    if cfg.norm_position == 'pre':
      x = normalize(cfg, x, 'final_norm')
    return x


class Decoder(nn.Module):
  """A stack of N decoder layers, then the shared pre-softmax projection."""

  config: TransformerConfig
  embeddings: Embeddings

  @nn.compact
  def __call__(
      self, encoded: jax.Array, source_mask: jax.Array, decoder_inputs: jax.Array,
      incremental: bool = False, source_segments: jax.Array | None = None,
      target_segments: jax.Array | None = None, project: bool = True,
      position: jax.Array | None = None,
  ) -> jax.Array:
    """encoded: (b, s, d_model); source_mask: (b, s) bool; decoder_inputs: (b, t) ids
    -> logits (b, t, vocab) float32. source_segments, target_segments: of a packed batch.
    project=False returns the decoder stack's output y (b, t, d_model) instead, before the
    pre-softmax projection (`Transformer.fused_loss_sums`).

    incremental: decoding with a 'cache' collection, the decoder's hypotheses coming `copies`
    to each of the n sentences of `encoded` (the hypotheses of beam search; `copies` is the
    ratio of the two batch sizes). The first call creates the cache for t positions (see
    `Transformer.init_cache`); each later call takes the one next input token per hypothesis
    (t = 1) at `position` (0, 1, ... in turn) and returns the logits of the next position. The
    self-attention cache keeps `copies` copies of each sentence's positions, and the decoder's
    cache holds `history` (n·copies, t): for every hypothesis and earlier position, which copy
    holds that position's keys and values (see MultiHeadAttention). A hypothesis writes its
    new position into its own copy; beam search, reordering hypotheses, reorders only
    `history`. A step reads the blocks of the self-attention cache up to its position's only
    (see MultiHeadAttention).
    """
    cfg = self.config
    offset, step, self_mask = 0, None, causal_mask(decoder_inputs.shape[1])
    if incremental:
      hypotheses = decoder_inputs.shape[0]
      copies = hypotheses // encoded.shape[0]
      own = jnp.arange(hypotheses, dtype=jnp.int32) % copies
      creating = not self.has_variable('cache', 'history')
      history = self.variable('cache', 'history',
                              lambda: jnp.broadcast_to(own[:, None], decoder_inputs.shape))
      if not creating:
        if position is None:
          raise ValueError('a decoding step needs the position of its inputs')
        offset = position
        history.value = jax.lax.dynamic_update_slice_in_dim(history.value, own[:, None],
                                                            offset, 1)
        length = history.value.shape[1]
        visible = ((history.value[:, :, None] == jnp.arange(copies))
                   & (jnp.arange(length) <= offset)[:, None])  # (hypothesis, position, copy)
        self_mask = visible.reshape(-1, 1, copies, length * copies)
      step = DecodeStep(offset, copies)
    y = _prepare(cfg, self.embeddings.embed(decoder_inputs, 'target'), 'position', offset,
                 target_segments)
    memory_mask = padding_mask(source_mask)
    if target_segments is not None:
      self_mask = self_mask & segment_mask(target_segments, target_segments)
      memory_mask = segment_mask(target_segments, source_segments)
    for i in range(cfg.num_layers):
      y = _layer_drop(DecoderLayer(cfg, name=f'layer_{i}'), cfg, y, encoded, self_mask,
                      memory_mask, step)
    if cfg.norm_position == 'pre':
      y = normalize(cfg, y, 'final_norm')
    return self.embeddings.logits(y) if project else y


class Transformer(nn.Module):
  """Encoder, decoder and their shared embeddings. `encode` and `decode` can be applied
  separately (`module.apply(variables, ..., method='encode')`), as decoding needs."""

  config: TransformerConfig

  def setup(self):
    self.embeddings = Embeddings(self.config)
    self.encoder = Encoder(self.config, self.embeddings)
    self.decoder = Decoder(self.config, self.embeddings)

  def encode(self, inputs: jax.Array, source_mask: jax.Array,
             source_segments: jax.Array | None = None) -> jax.Array:
    return self.encoder(inputs, source_mask, source_segments)

  def decode(
      self, encoded: jax.Array, source_mask: jax.Array, decoder_inputs: jax.Array,
      incremental: bool = False, source_segments: jax.Array | None = None,
      target_segments: jax.Array | None = None, position: jax.Array | None = None,
  ) -> jax.Array:
    return self.decoder(encoded, source_mask, decoder_inputs, incremental, source_segments,
                        target_segments, position=position)

  def init_cache(self, encoded: jax.Array, source_mask: jax.Array, length: int,
                 copies: int = 1) -> None:
    """Creates the incremental-decoding cache for outputs of up to `length` tokens, `copies`
    hypotheses per sentence; apply with `mutable=['cache']` and keep the 'cache'
    collection. The encoder-decoder attention keys and values of `encoded` are computed here,
    once per sentence. The decoder's output over the placeholder inputs is discarded (under
    jit, never computed)."""
    placeholder = jnp.zeros((encoded.shape[0] * copies, length), jnp.int32)
    self.decoder(encoded, source_mask, placeholder, incremental=True)

  def __call__(self, inputs: jax.Array, decoder_inputs: jax.Array,
               source_segments: jax.Array | None = None,
               target_segments: jax.Array | None = None) -> jax.Array:
    source_mask = inputs != PAD_ID
    encoded = self.encode(inputs, source_mask, source_segments)
    return self.decode(encoded, source_mask, decoder_inputs, source_segments=source_segments,
                       target_segments=target_segments)

  def fused_loss_sums(self, inputs: jax.Array, decoder_inputs: jax.Array, targets: jax.Array,
                      label_smoothing: float, chunk: int,
                      source_segments: jax.Array | None = None,
                      target_segments: jax.Array | None = None) -> dict:
    """`loss.loss_sums` of `__call__`'s logits, with the pre-softmax projection and the loss
    fused, `chunk` target positions at a time (`loss.fused_loss_sums`)."""
    source_mask = inputs != PAD_ID
    encoded = self.encode(inputs, source_mask, source_segments)
    y = self.decoder(encoded, source_mask, decoder_inputs, source_segments=source_segments,
                     target_segments=target_segments, project=False)
    return loss.fused_loss_sums(y, self.embeddings.output_table(), targets, label_smoothing,
                                chunk)
