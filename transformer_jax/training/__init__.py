"""Training with the paper's recipe (§5): Adam with eq. 3's schedule, the train step, the input
feed, checkpoints and logs; `loop.train_loop` runs them."""
