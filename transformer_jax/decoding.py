"""Greedy decoding, used for BLEU on the dev split during training.

Each step re-runs the decoder over the whole output buffer (no key/value cache) and takes the
argmax at the next position, inside one `lax.while_loop` that stops when every row has
emitted EOS. The output buffer holds input length + `max_extra_length` tokens (§6.1).
"""

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.data.tokenizer import EOS_ID
from transformer_jax.model import Transformer
from transformer_jax.model_config import PAD_ID


def greedy(model: Transformer, params, inputs: jax.Array, max_extra_length: int) -> jax.Array:
  """inputs: (b, s) source ids -> (b, s + max_extra_length) output ids, PAD_ID after EOS.
  `model` must be deterministic (dropout off)."""
  batch, length = inputs.shape[0], inputs.shape[1] + max_extra_length
  source_mask = inputs != PAD_ID
  variables = {'params': params}
  encoded = model.apply(variables, inputs, source_mask, method='encode')

  def step(carry):
    i, outputs, done = carry
    decoder_inputs = jnp.pad(outputs[:, :-1], ((0, 0), (1, 0)), constant_values=PAD_ID)
    logits = model.apply(variables, encoded, source_mask, decoder_inputs, method='decode')
    token = jnp.argmax(jax.lax.dynamic_index_in_dim(logits, i, axis=1, keepdims=False), -1)
    token = jnp.where(done, PAD_ID, token).astype(outputs.dtype)
    outputs = jax.lax.dynamic_update_index_in_dim(outputs, token, i, axis=1)
    return i + 1, outputs, done | (token == EOS_ID)

  def running(carry):
    i, _, done = carry
    return (i < length) & ~jnp.all(done)

  # Empty (all-padding) rows are done from the start.
  initial = (0, jnp.zeros((batch, length), inputs.dtype), ~jnp.any(source_mask, axis=1))
  return jax.lax.while_loop(running, step, initial)[1]


def strip(tokens: np.ndarray) -> list[int]:
  """A row of output ids up to (not including) its first EOS or padding."""
  ids = []
  for token in tokens.tolist():
    if token in (EOS_ID, PAD_ID):
      break
    ids.append(token)
  return ids
