"""Encoder and decoder layers (§3.1), the position-wise feed-forward network (§3.3) and the
normalisation that wraps every sub-layer.

Shapes use b = batch, s = source length, t = target length.
"""

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax.model.attention import DecodeStep, MultiHeadAttention, glorot_uniform
from transformer_jax.model.dropout import Dropout
from transformer_jax.model.model_config import TransformerConfig


class ScaleNorm(nn.Module):
  """ScaleNorm(x; g) = g · x / ||x|| with one learned scalar g, initialised to sqrt(d_model)
  (Nguyen & Salazar, 2019, "Transformers without Tears"). An option; the paper uses LayerNorm."""

  epsilon: float = 1e-5

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    g = self.param('scale', nn.initializers.constant(x.shape[-1] ** 0.5), (), jnp.float32)
    x = x.astype(jnp.float32)
    norm = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
    return g * x / jnp.maximum(norm, self.epsilon)


def normalize(cfg: TransformerConfig, x: jax.Array, name: str) -> jax.Array:
  """Layer normalisation (Ba et al., 2016; ε = 1e-6 as in tensor2tensor) or ScaleNorm,
  computed in float32 and returned in the compute dtype."""
  if cfg.norm_type == 'scale_norm':
    norm = ScaleNorm(name=name)
  else:
    norm = nn.LayerNorm(
        epsilon=1e-6,
        dtype=jnp.float32,
        param_dtype=cfg.param_dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ('embed',)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ('embed',)),
        name=name,
    )
  return norm(x).astype(cfg.dtype)


def sublayer_connection(
    cfg: TransformerConfig, x: jax.Array, sublayer: Callable[[jax.Array], jax.Array], name: str
) -> jax.Array:
  """The residual connection around each sub-layer, with residual dropout (§5.4).

  Post-norm (the paper, §3.1): LayerNorm(x + Dropout(Sublayer(x))).
  Pre-norm (option):           x + Dropout(Sublayer(LayerNorm(x))).
  """
  dropout = Dropout(cfg.dropout_rate, deterministic=cfg.deterministic)
  if cfg.norm_position == 'pre':
    return x + dropout(sublayer(normalize(cfg, x, f'{name}_norm')))
  return normalize(cfg, x + dropout(sublayer(x)), f'{name}_norm')


class FeedForward(nn.Module):
  """FFN(x) = max(0, x W1 + b1) W2 + b2, applied at every position (§3.3, eq. 2).

  `relu_dropout_rate` (default 0, the paper's setting) drops the inner activations, as
  tensor2tensor's later versions do.
  """

  config: TransformerConfig

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cfg = self.config

    def dense(features, axes, name):
      return nn.Dense(
          features,
          dtype=cfg.dtype,
          param_dtype=cfg.param_dtype,
          kernel_init=nn.with_logical_partitioning(glorot_uniform, axes),
          bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
          name=name,
      )

    h = nn.relu(dense(cfg.d_ff, ('embed', 'mlp'), 'inner')(x))
    h = Dropout(cfg.relu_dropout_rate)(h, deterministic=cfg.deterministic)
    return dense(cfg.d_model, ('mlp', 'embed'), 'outer')(h)


class EncoderLayer(nn.Module):
  """Self-attention, then the feed-forward network, each wrapped by `sublayer_connection`."""

  config: TransformerConfig

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    """x: (b, s, d_model); mask: (b, 1, 1, s) source padding mask, or (b, 1, s, s) within the
    segments of a packed batch."""
    cfg = self.config
    attention = MultiHeadAttention(cfg, name='self_attention')
    x = sublayer_connection(cfg, x, lambda y: attention(y, y, mask), 'self_attention')
    return sublayer_connection(cfg, x, FeedForward(cfg, name='ffn'), 'ffn')


class DecoderLayer(nn.Module):
  """Masked self-attention, attention over the encoder output, then the feed-forward network."""

  config: TransformerConfig

  @nn.compact
  def __call__(
      self, y: jax.Array, encoded: jax.Array, self_mask: jax.Array, memory_mask: jax.Array,
      step: DecodeStep | None = None,
  ) -> jax.Array:
    """y: (b, t, d_model); encoded: (b, s, d_model); self_mask: (1, 1, t, t) causal;
    memory_mask: (b, 1, 1, s) source padding mask (a packed batch: both (b, 1, t, ·), within
    segments); step: incremental decoding with the attentions' caches, the masks then those
    of `Decoder` (see MultiHeadAttention)."""
    cfg = self.config
    self_attention = MultiHeadAttention(cfg, name='self_attention')
    y = sublayer_connection(cfg, y, lambda z: self_attention(z, z, self_mask, step),
                            'self_attention')
    cross_attention = MultiHeadAttention(cfg, encoder_decoder=True, name='encoder_attention')
    y = sublayer_connection(
        cfg, y, lambda z: cross_attention(z, encoded, memory_mask, step), 'encoder_attention')
    return sublayer_connection(cfg, y, FeedForward(cfg, name='ffn'), 'ffn')
