"""Label-smoothed cross entropy (§5.4) and the per-token negative log-likelihood.

Smoothing follows tensor2tensor (`smoothing_cross_entropy`): the target distribution puts
1 - ε_ls on the reference token and ε_ls / (vocab - 1) on every other token, and the entropy of
that distribution is subtracted so that a perfect prediction has loss 0. Padding positions
(target id 0) are excluded; `per_token` divides the sums by the number of non-padding
tokens.
"""

import functools

import jax
import jax.numpy as jnp

from transformer_jax.data.tokenizer import PAD_ID

SUM_NAMES = ('loss', 'nll', 'correct', 'tokens')


def loss_sums(logits: jax.Array, targets: jax.Array, label_smoothing: float) -> dict:
  """Sums over non-padding target positions.

  Args:
    logits: (b, t, vocab) float32.
    targets: (b, t) int ids, PAD_ID where there is no token.
    label_smoothing: ε_ls.

  Returns:
    {'loss': smoothed cross entropy sum, 'nll': unsmoothed negative log-likelihood sum,
     'correct': argmax hits, 'tokens': number of non-padding targets}; per-token perplexity
    is exp(nll / tokens).
  """
  return _sums_and_logit_gradient(logits, targets, label_smoothing)[0]


def _sums_and_logit_gradient(logits: jax.Array, targets: jax.Array, label_smoothing: float,
                             sum_logits: jax.Array | None = None) -> tuple[dict, jax.Array]:
  """`loss_sums`, and the 'loss' sum's gradient wrt the logits, w (p - q), written out for
  `fused_loss_sums` (unused, and not computed under jit, by `loss_sums`). sum_logits, the
  (b, t) sums of the logits over the vocabulary, is computed from the logits unless given."""
  vocab = logits.shape[-1]
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  logits = logits.astype(jnp.float32)
  # log p_v = logit_v - logsumexp(logits). Written out from the logsumexp so that no
  # (b, t, vocab) array of log-probabilities is materialised
  # (experiments/speed/README.md).
  peak = jax.lax.stop_gradient(jnp.max(logits, axis=-1))
  exp = jnp.exp(logits - peak[..., None])
  total = jnp.sum(exp, axis=-1)
  log_normalizer = peak + jnp.log(total)
  target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  nll = log_normalizer - target_logit
  if sum_logits is None:
    sum_logits = jnp.sum(logits, axis=-1)
  sum_log_probs = sum_logits - vocab * log_normalizer
  # Cross entropy against the smoothed distribution, without materialising it.
  smoothed = confidence * nll - low * (sum_log_probs + nll)
  entropy = -(confidence * jnp.log(confidence) + (vocab - 1) * low * jnp.log(low + 1e-20))
  weights = (targets != PAD_ID).astype(jnp.float32)
  sums = {
      'loss': jnp.sum((smoothed - entropy) * weights),
      'nll': jnp.sum(nll * weights),
      # The reference token has the largest logit (a tie counts as a hit).
      'correct': jnp.sum((target_logit >= peak) * weights),
      'tokens': jnp.sum(weights),
  }
  q = jnp.where(jnp.arange(vocab) == targets[..., None], confidence, low)
  return sums, (exp / total[..., None] - q) * weights[..., None]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def fused_loss_sums(y: jax.Array, table: jax.Array, targets: jax.Array,
                    label_smoothing: float | jax.Array, chunk: int) -> dict:
  """`loss_sums(embeddings.project(y, table), targets, label_smoothing)`, computed `chunk`
  target positions at a time, so that the (b, t, vocab) logits are never whole.

  The gradient of the 'loss' sum is formed in the same pass, chunk by chunk, from
  d loss / d logit_v = w (p_v - q_v), with p the softmax, q the smoothed target distribution
  (1 - ε_ls on the reference token, ε_ls / (vocab - 1) elsewhere) and w 1 at non-padding
  targets, 0 at padding: no logits are kept for the backward pass, which only scales the
  gradients by the loss's cotangent. Only the 'loss' sum is differentiable: the other sums'
  cotangents are ignored (they are metrics; `jax.grad(..., has_aux=True)` never sends any).
  As in `embeddings.project`, the logit gradient is rounded to y's dtype before its two
  products.

  Args:
    y: (b, t, d_model), the decoder's output in the compute dtype.
    table: (vocab, d_model), the output projection (the shared embedding matrix, §3.4).
    targets: (b, t) int ids, PAD_ID where there is no token.
    label_smoothing: ε_ls, a number or a traced scalar (one run's of several trained together,
      `transformer_jax.training.together`); not differentiated.
    chunk: target positions per chunk (t is padded to a multiple of it).
  """
  return _fused_forward(y, table, targets, label_smoothing, chunk)[0]


def _fused_forward(y, table, targets, label_smoothing, chunk):
  b, t, d_model = y.shape
  positions = -(-t // chunk) * chunk
  # (chunks, b, chunk, ...): chunks over positions keep the sequences, and so their sharding
  # over the batch axes, in every chunk.
  y_chunks = jnp.pad(y, ((0, 0), (0, positions - t), (0, 0))).reshape(b, -1, chunk, d_model)
  target_chunks = jnp.pad(targets, ((0, 0), (0, positions - t)),
                          constant_values=PAD_ID).reshape(b, -1, chunk)
  xs = (jnp.swapaxes(y_chunks, 0, 1), jnp.swapaxes(target_chunks, 0, 1))
  # Σ_v logit_v = y · Σ_v table_v: label smoothing's sum of the logits as a matrix-vector
  # product, instead of one more pass over the (b, chunk, vocab) logits (memory-bound on a GPU).
  # The same sum but for rounding (another summation order); it enters the loss, not its
  # gradient.
  table_sum = jnp.sum(table.astype(jnp.float32), axis=0)

  def step(carry, chunk_xs):
    sums, dtable = carry
    y_chunk, target_chunk = chunk_xs
    logits = jnp.einsum('btd,vd->btv', y_chunk, table, preferred_element_type=jnp.float32)
    sum_logits = jnp.einsum('btd,d->bt', y_chunk.astype(jnp.float32), table_sum)
    chunk_sums, g = _sums_and_logit_gradient(logits, target_chunk, label_smoothing, sum_logits)
    g = g.astype(y.dtype)
    dy = jnp.einsum('btv,vd->btd', g, table)
    # Summed over chunks in float32; each product in the compute dtype, as in
    # `embeddings.project` (XLA's CPU backend has no bfloat16 product with a float32 result here).
    dtable += jnp.einsum('btd,btv->dv', y_chunk, g).T.astype(jnp.float32)
    return (jax.tree.map(jnp.add, sums, chunk_sums), dtable), dy

  zeros = {name: jnp.zeros((), jnp.float32) for name in SUM_NAMES}
  (sums, dtable), dy = jax.lax.scan(step, (zeros, jnp.zeros(table.shape, jnp.float32)), xs)
  dy = jnp.swapaxes(dy, 0, 1).reshape(b, positions, d_model)[:, :t]
  return sums, (dy.astype(y.dtype), dtable.astype(table.dtype))


def _fused_backward(chunk, residuals, cotangents):
  del chunk
  dy, dtable = residuals
  scale = cotangents['loss']
  return dy * scale.astype(dy.dtype), dtable * scale.astype(dtable.dtype), None, None


fused_loss_sums.defvjp(_fused_forward, _fused_backward)


def per_token(sums: dict) -> dict:
  """`loss_sums` (of one batch or added over many) -> loss, nll and accuracy per non-padding
  target token, and the per-token perplexity exp(nll) of Table 3."""
  tokens = jnp.maximum(sums['tokens'], 1.0)
  nll = sums['nll'] / tokens
  return {'loss': sums['loss'] / tokens, 'nll': nll, 'perplexity': jnp.exp(nll),
          'accuracy': sums['correct'] / tokens}
