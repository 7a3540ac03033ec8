"""Dropout (Srivastava et al., 2014): the residual dropout of §5.4, and the options' dropout
on attention weights and FFN activations and DropHead.

`Dropout` is flax's `nn.Dropout` (same fields, same call, same rng stream 'dropout') with its
keep mask drawn from half as many random bits. JAX's default random number generator
(threefry, in its partitionable form, so that a sharded array gets the bits of the unsharded
one) spends one threefry2x32 block on every element of `jax.random.bernoulli`. Here each
32-bit word of `jax.random.bits` gives two 16-bit draws. The words cover half of the
second-to-last dimension, of size n (the first, for 1-D inputs); their low halves are the
draws of its positions 0 ... ceil(n/2) - 1, their high halves those of the rest. At the
model's sites that dimension is the positions of (b, length, d) activations or the queries of
(b, h, q, k) attention weights, which no mesh axis splits; for DropHead's (b, 1, h, 1) mask it
is the heads, which tensor parallelism splits (the bits are the same however the array is
split, and that mask has only b · h elements). Concatenated, the halves fuse into the mask on
XLA's CPU backend, where a bitcast of each word to two uint16 made a copy; the dimension
split was chosen by measurement (experiments/speed/README.md).

The rate may also be a traced scalar, one run's of several trained together
(`transformer_jax.training.together`): the threshold is then rounded in float32, which gives the
same threshold as a Python rate for every rate of up to three decimals (`tests/test_dropout.py`),
and the mask is drawn even at rate 0 (every element kept).

An element is kept when its draw is below round(keep_prob · 2^16), so the keep probability is
that threshold / 2^16 (within 2^-17 of 1 - rate; 0.7 becomes 0.699997), and kept elements are
multiplied by its exact inverse in float32, then rounded to the input's dtype, so that in
float32 every element's expectation is unchanged, as the paper's dropout keeps it (flax
divides by keep_prob in the input's dtype). Measured figures: docs/performance.md ("Dropout's
random bits").
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

_DRAWS = 2 ** 16  # values of one 16-bit draw


class Dropout(nn.Dropout):
  """`nn.Dropout` with masks from 16-bit draws (module docstring), for inputs of one dimension
  or more. `broadcast_dims` share one draw along those dimensions (DropHead drops whole heads
  this way)."""

  def __call__(self, inputs: jax.Array, deterministic: bool | None = None,
               rng: jax.Array | None = None) -> jax.Array:
    deterministic = nn.merge_param('deterministic', self.deterministic, deterministic)
    if deterministic:
      return inputs
    if isinstance(self.rate, jax.Array):  # one rate of runs trained together
      threshold = jnp.round((1.0 - self.rate.astype(jnp.float32)) * _DRAWS).astype(jnp.uint32)
      scale = _DRAWS / jnp.maximum(threshold, 1).astype(jnp.float32)
    else:
      threshold = round((1.0 - self.rate) * _DRAWS)
      if threshold == _DRAWS:
        return inputs
      if threshold == 0:
        return jnp.zeros_like(inputs)
      scale = _DRAWS / threshold
    if rng is None:
      rng = self.make_rng(self.rng_collection)
    shape = list(inputs.shape)
    for dim in self.broadcast_dims:
      shape[dim] = 1
    axis = max(inputs.ndim - 2, 0)
    size = shape[axis]
    shape[axis] = math.ceil(size / 2)
    words = jax.random.bits(rng, tuple(shape), jnp.uint32)
    draws = jnp.concatenate([words & 0xFFFF, words >> 16], axis=axis)
    keep = jax.lax.slice_in_dim(draws, 0, size, axis=axis) < threshold
    keep = jnp.broadcast_to(keep, inputs.shape)
    scaled = (inputs.astype(jnp.float32) * scale).astype(inputs.dtype)
    return jnp.where(keep, scaled, jnp.zeros_like(inputs))
