"""The optimizer of §5.3: Adam (β1 = 0.9, β2 = 0.98, ε = 1e-9) with eq. 3's learning rate.

The learning rate is

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


def schedule(config: ml_collections.ConfigDict, warmup_steps=None, lr_scale=None):
  """Eq. 3 with d_model, warmup_steps and lr_scale from `config`, the last two unless given
  (traced, as `Trainer.step` takes them for runs trained together)."""
  train = config.train
  return learning_rate_schedule(
      config.model.d_model, train.warmup_steps if warmup_steps is None else warmup_steps,
      train.lr_scale if lr_scale is None else lr_scale)


def adam(config: ml_collections.ConfigDict, lr_schedule=None) -> optax.GradientTransformation:
  """Adam with the paper's hyper-parameters from `config.train`, and its schedule (`schedule`)
  unless another is given. The state has the same structure whatever the schedule."""
  train = config.train
  return optax.adam(schedule(config) if lr_schedule is None else lr_schedule, b1=train.adam_b1,
                    b2=train.adam_b2, eps=train.adam_eps)
