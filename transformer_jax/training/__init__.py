"""Training with the paper's recipe (§5): the run's config, Adam with eq. 3's schedule, the
train step, the input feed, checkpoints and logs; `transformer_jax.train` runs the loop."""
