"""Parameter counts and model FLOPs, computed without allocating the model.

FLOPs count the matrix multiplications of the forward pass at 2 FLOPs per multiply-add (the
usual "model FLOPs" of MFU figures): attention projections, attention scores and weighted
sums, the feed-forward networks and the pre-softmax projection. Embedding lookups, biases,
softmax and normalisation are not counted. The backward pass costs twice the forward, so a
training step costs 3x.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model.model_config import TransformerConfig
from transformer_jax.model.transformer import Transformer


def abstract_params(cfg: TransformerConfig):
  """The parameter tree as jax.ShapeDtypeStructs (`jax.eval_shape`; nothing is allocated)."""
  tokens = jax.ShapeDtypeStruct((1, 1), jnp.int32)
  module = Transformer(cfg.replace(deterministic=True))
  return nn.unbox(jax.eval_shape(module.init, jax.random.key(0), tokens, tokens)['params'])


def _is_embedding(path) -> bool:
  names = {getattr(key, 'key', None) for key in path}
  return 'embeddings' in names or 'position' in names


def param_counts(cfg: TransformerConfig) -> dict:
  """Total, embedding (token tables and learned position tables) and non-embedding counts."""
  sizes = [(_is_embedding(path), int(np.prod(leaf.shape)))
           for path, leaf in jax.tree_util.tree_leaves_with_path(abstract_params(cfg))]
  embedding = sum(size for is_embedding, size in sizes if is_embedding)
  total = sum(size for _, size in sizes)
  return {'total': total, 'embedding': embedding, 'non_embedding': total - embedding}


def _attention_flops(cfg: TransformerConfig, q_len: int, kv_len: int) -> int:
  """Multi-head attention (§3.2.2) with q_len queries over kv_len keys and values."""
  h, d, d_k, d_v = cfg.num_heads, cfg.d_model, cfg.d_k, cfg.d_v
  projections = q_len * d * h * d_k + kv_len * d * h * (d_k + d_v) + q_len * h * d_v * d
  scores_and_sums = q_len * kv_len * h * (d_k + d_v)
  return 2 * (projections + scores_and_sums)


def forward_flops(cfg: TransformerConfig, source_length: int, target_length: int) -> int:
  """Forward FLOPs for one sentence pair; the decoder's self-attention is counted in full, as
  it is computed (the causal mask does not skip work)."""
  s, t = source_length, target_length
  ffn = lambda n: 2 * 2 * n * cfg.d_model * cfg.d_ff
  encoder_layer = _attention_flops(cfg, s, s) + ffn(s)
  decoder_layer = _attention_flops(cfg, t, t) + _attention_flops(cfg, t, s) + ffn(t)
  output_projection = 2 * t * cfg.d_model * cfg.vocab_size
  return cfg.num_layers * (encoder_layer + decoder_layer) + output_projection


def flops_per_token(cfg: TransformerConfig, length: int) -> float:
  """Forward FLOPs per target token for pairs whose source and target both have `length`."""
  return forward_flops(cfg, length, length) / length
