"""The optimizer of §5.3: Adam (β1 = 0.9, β2 = 0.98, ε = 1e-9) with the paper's learning rate,

  lrate = d_model^-0.5 · min(step_num^-0.5, step_num · warmup_steps^-1.5)      (eq. 3)

rising linearly for warmup_steps and then decaying with the inverse square root of the step.
"""

import jax.numpy as jnp
import ml_collections
import optax


def learning_rate_schedule(d_model: int, warmup_steps: int, lr_scale: float = 1.0):
  """Eq. 3 times lr_scale, as an optax schedule. optax counts updates from 0; the paper's
  step_num counts from 1, so update k uses step_num = k + 1."""

  def schedule(count):
    step = jnp.asarray(count, jnp.float32) + 1.0
    return lr_scale * d_model**-0.5 * jnp.minimum(step**-0.5, step * warmup_steps**-1.5)

  return schedule


def schedule(config: ml_collections.ConfigDict):
  """Eq. 3 with d_model, warmup_steps and lr_scale from `config`."""
  return learning_rate_schedule(config.model.d_model, config.train.warmup_steps,
                                config.train.lr_scale)


def adam(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Adam with the paper's hyper-parameters and schedule, from `config.train`."""
  train = config.train
  return optax.adam(schedule(config), b1=train.adam_b1, b2=train.adam_b2, eps=train.adam_eps)
