"""Three groups of two small rows (each row with its seed 1), `configs/tiny.py` trained for 200
steps: the sweep that `experiments/sweep_overhead/measure.py` times (on a part of the built-in
corpus, by its overrides), where the sweep's own work (processes, data, compiling, evaluation,
checkpoints) is much of the time.

  python -m transformer_jax.sweep --sweep=experiments/sweep_overhead/sweep.py --workdir=DIR \
      --together=2
"""

from transformer_jax.config import loading

tiny = loading.import_sibling(__file__, '../../configs/tiny')

# Three shapes (d_ff), each with seeds 0 and 1: --together=2 makes three groups of two.
ROWS = {f'{name}{suffix}': {'model.d_ff': d_ff, 'seed': seed}
        for name, d_ff in (('a', 256), ('b', 384), ('c', 512))
        for suffix, seed in (('', 0), ('_seed1', 1))}


def get_config(row='a'):
  config = tiny.get_config()
  config.update_from_flattened_dict({
      'train.num_train_steps': 200, 'train.log_every_steps': 20,
      'train.eval_every_steps': 200, 'train.checkpoint_every_steps': 100,
      'data.buckets': 'coarse',
      'train.num_eval_steps': 1, 'train.eval_bleu': False, **ROWS[row]})
  return config
