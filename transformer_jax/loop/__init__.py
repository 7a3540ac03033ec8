"""The loop over training steps, checkpoints and dev evaluations (`train_loop`), with its
metrics (`train_metrics`): the top library layer, beneath the commands."""
