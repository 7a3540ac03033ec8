"""The training loop (`train_loop`: one run's story), the runs it trains (`runs`: one, or a
group trained as one program, `group`) and its metrics (`train_metrics`)."""
