r"""The training command: trains a config's run in a workdir (`loop.train_loop`).

  python -m transformer_jax.train --config=configs/base.py --workdir=DIR \
      [--config.train.num_train_steps=...]

The config and its overrides are checked before any work starts (`cli`); running the command
again with the same workdir resumes from its latest checkpoint.
"""

from absl import flags
from ml_collections import config_flags

from transformer_jax import cli
from transformer_jax.loop import train_loop

if __name__ == '__main__':
  _CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file.', lock_config=True)
  _WORKDIR = flags.DEFINE_string('workdir', None,
                                 'Directory for checkpoints, logs, vocabulary.', required=True)
  flags.mark_flag_as_required('config')
  cli.run(lambda: train_loop.train_and_evaluate(_CONFIG.value, _WORKDIR.value))
