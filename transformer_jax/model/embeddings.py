"""Token embeddings with the shared pre-softmax projection (§3.4) and positional encodings
(§3.5)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.data.tokenizer import PAD_ID
from transformer_jax.model.attention import glorot_uniform
from transformer_jax.model.model_config import TransformerConfig


def sinusoid(length: int, d_model: int) -> np.ndarray:
  """The paper's positional encoding (§3.5), a (length, d_model) float32 table:

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

  Sines on even and cosines on odd dimensions, interleaved exactly as the formula says.
  (tensor2tensor concatenates all sines, then all cosines, with a slightly different frequency
  spacing; we follow the paper.)
  """
  position = np.arange(length, dtype=np.float64)[:, None]
  even_dims = np.arange(0, d_model, 2, dtype=np.float64)  # the values of 2i
  angle = position / np.power(10000.0, even_dims / d_model)  # (length, ceil(d_model / 2))
  table = np.empty((length, d_model), np.float64)
  table[:, 0::2] = np.sin(angle)
  table[:, 1::2] = np.cos(angle[:, : d_model // 2])
  return table.astype(np.float32)


class PositionalEncoding(nn.Module):
  """Adds the position signal to the embeddings at the bottom of a stack (§3.5): the sinusoid,
  or a learned (max_len, d_model) table (Table 3 row E). The paper does not say how the table
  is initialised; it is Glorot-uniform over its own shape, variance 2 / (max_len + d_model), as
  tensor2tensor's Transformer draws its [max_length, depth] table (`pos='emb'`, a later
  addition: the 2017 one had only the sinusoid), which gets the model-wide default initialiser
  ("uniform_unit_scaling", gain 1); its table has transformer_base's max_length of 256 rows,
  ours max_len's (512 in the configs). Encoder and decoder each own their learned table."""

  config: TransformerConfig

  @nn.compact
  def __call__(self, x: jax.Array, offset: jax.Array | int = 0,
               positions: jax.Array | None = None) -> jax.Array:
    """x: (b, length, d_model) at positions offset..offset+length-1 (a traced offset is how
    incremental decoding places its one new position), or at `positions` (b, length) when
    given (packed sequences, where every sentence starts again at 0)."""
    cfg = self.config
    length = x.shape[1]
    if length > cfg.max_len:
      raise ValueError(f'sequence length {length} exceeds config.model.max_len={cfg.max_len}, '
                       'the number of positions the model encodes')
    if cfg.position_encoding == 'learned':
      table = self.param(
          'embedding',
          nn.with_logical_partitioning(glorot_uniform, ('position', 'embed')),
          (cfg.max_len, cfg.d_model),
          cfg.param_dtype,
      )
    else:
      table = jnp.asarray(sinusoid(cfg.max_len, cfg.d_model))
    if positions is not None:
      return x + jnp.take(table, positions, axis=0).astype(cfg.dtype)
    table = jax.lax.dynamic_slice_in_dim(table, offset, length)
    return x + table.astype(cfg.dtype)[None]


class Embeddings(nn.Module):
  """Token embeddings and the pre-softmax linear transformation (§3.4).

  By default one (vocab, d_model) matrix, initialised normal(0, d_model^-0.5) as in
  tensor2tensor, serves the source embedding, the target embedding and the output projection;
  embeddings are multiplied by sqrt(d_model). `share_embeddings=False` gives each role its own
  matrix. With `fixnorm` (an option from "Transformers without Tears") every row is scaled to
  unit length before use.

  The padding id 0 is also the decoder's start symbol (the targets shifted right). With
  `decoder_start='zero'` it embeds to zeros, as in tensor2tensor, whose symbol modality zeroes
  id 0's embedding and whose decoder input is the embedded targets shifted right, a zero vector
  first; with 'learned' it embeds to its row of the matrix like any other token.
  """

  config: TransformerConfig

  def setup(self):
    cfg = self.config
    init = nn.with_logical_partitioning(nn.initializers.normal(cfg.d_model**-0.5),
                                        ('vocab', 'embed'))
    roles = ('shared',) if cfg.share_embeddings else ('source', 'target', 'output')
    self.tables = {
        role: self.param(role, init, (cfg.vocab_size, cfg.d_model), cfg.param_dtype)
        for role in roles
    }

  def _table(self, role: str) -> jax.Array:
    """The role's matrix in the parameter dtype."""
    table = self.tables['shared' if self.config.share_embeddings else role]
    if self.config.fixnorm:
      table = table / jnp.linalg.norm(table, axis=-1, keepdims=True)
    return table

  def embed(self, tokens: jax.Array, role: str) -> jax.Array:
    """tokens: (b, length) int -> (b, length, d_model) in the compute dtype, times
    sqrt(d_model). role: 'source' or 'target'."""
    scale = jnp.asarray(self.config.d_model**0.5, self.config.dtype)
    # Gathered from the parameter-dtype matrix, then cast, so that the gradient's scatter-add
    # accumulates in float32, not bfloat16 (experiments/gpu/README.md).
    embedded = jnp.take(self._table(role), tokens, axis=0).astype(self.config.dtype) * scale
    if self.config.decoder_start == 'zero':
      embedded = jnp.where((tokens != PAD_ID)[..., None], embedded, 0)
    return embedded

  def output_table(self) -> jax.Array:
    """The pre-softmax projection's (vocab, d_model) matrix, in the compute dtype."""
    return self._table('output').astype(self.config.dtype)

  def logits(self, y: jax.Array) -> jax.Array:
    """The pre-softmax projection: (b, t, d_model) -> (b, t, vocab) float32 logits."""
    return project(y, self.output_table())


@jax.custom_vjp
def project(y: jax.Array, table: jax.Array) -> jax.Array:
  """(b, t, d_model) x (vocab, d_model) -> (b, t, vocab) float32: y times the table transposed.

  The backward pass is autodiff's but for two things: the table's gradient is written as
  (y^T g)^T, and the float32 logit gradient is rounded to the compute dtype before both
  products, as the gradient of a compute-dtype output would be (a precision trade-off in
  bfloat16, none in float32).
  """
  return jnp.einsum('btd,vd->btv', y, table, preferred_element_type=jnp.float32)


def _project_forward(y, table):
  return project(y, table), (y, table)


def _project_backward(residuals, g):
  y, table = residuals
  # The products take the logit gradient in the compute dtype, as they would the gradient of a
  # compute-dtype output: float32 with bfloat16 operands would run them at float32's cost
  # (TF32 on a GPU; experiments/gpu/README.md). Their results are
  # wanted in the compute dtype, so none asks for a float32 result (XLA's CPU backend has no
  # bfloat16 x bfloat16 -> float32 kernel for the table's product over (b, t)).
  g = g.astype(y.dtype)
  dy = jnp.einsum('btv,vd->btd', g, table)
  # (y^T g)^T rather than g^T y: otherwise XLA's CPU backend copies the (b·t, vocab) logit
  # gradient into a transposed layout for this product
  # (experiments/speed/README.md).
  dtable = jnp.einsum('btd,btv->dv', y, g).T
  return dy.astype(y.dtype), dtable.astype(table.dtype)


project.defvjp(_project_forward, _project_backward)
