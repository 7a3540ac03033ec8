"""The training loop (`train_loop`: one run's story), the runs it trains (`runs`: one, or a
group trained as one program, `runs_together`) and its metrics (`train_metrics`)."""
