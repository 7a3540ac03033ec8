"""The one frozen configuration that every model module reads.

Built from the `model` section of an ml_collections config (see `configs/base.py`, where
each field is documented with its source in the paper) plus the vocabulary size and the
compute dtype. Modes are switched with `dataclasses.replace`, e.g.
`cfg.replace(deterministic=True)` for evaluation.
"""

import dataclasses
from typing import Any

import jax.numpy as jnp

from transformer_jax.config import platforms


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyper-parameters of the encoder-decoder Transformer (§3), names as in the paper."""

  vocab_size: int
  num_layers: int = 6  # N, in the encoder and in the decoder
  d_model: int = 512
  d_ff: int = 2048
  num_heads: int = 8  # h
  d_k: int = 64
  d_v: int = 64
  dropout_rate: float = 0.1  # P_drop (§5.4)
  attention_dropout_rate: float = 0.0
  relu_dropout_rate: float = 0.0
  layerdrop_rate: float = 0.0
  drophead_rate: float = 0.0
  position_encoding: str = 'sinusoid'  # or 'learned' (Table 3 row E)
  max_len: int = 512  # the most positions either encoding accepts (rows of a learned table)
  share_embeddings: bool = True  # §3.4
  decoder_start: str = 'zero'  # the padding id's input embedding: zero (tensor2tensor) or 'learned'
  qkv_init: str = 'fused'  # tensor2tensor v1's fused Q/K/V projections, or 'separate'
  attention_bias: bool = False  # biases on W^Q, W^K, W^V and W^O
  # eq. (1) written out, or jax.nn.dot_product_attention's 'xla' or 'cudnn' implementation
  attention_impl: str = 'explicit'
  norm_position: str = 'post'  # 'post' (§3.1) or 'pre'
  norm_type: str = 'layer_norm'  # or 'scale_norm'
  fixnorm: bool = False
  dtype: Any = jnp.float32  # compute dtype
  param_dtype: Any = jnp.float32
  deterministic: bool = False  # True disables every kind of dropout
  # Logical axis -> mesh axes (`config.parallel.axis_rules`), set by `ShardedModel`: the
  # activations' placement (`transformer.split_sequences`). () places nothing.
  axis_rules: tuple = ()

  def replace(self, **changes) -> 'TransformerConfig':
    return dataclasses.replace(self, **changes)


def from_config(config) -> TransformerConfig:
  """The model's config of a run's valid ml_collections config (`checks.validate`):
  `config.model`, the vocabulary size and the compute dtype ('auto': this platform's)."""
  return TransformerConfig(vocab_size=config.data.vocab_size,
                           dtype=jnp.dtype(platforms.dtype(config)), **config.model.to_dict())
