r"""Trains a Transformer with the paper's recipe (§5) on every available device.

  python -m transformer_jax.train --config=configs/base.py --workdir=DIR \
      [--config.train.num_train_steps=...]

Restarting with the same workdir resumes from its latest checkpoint (see
`transformer_jax.training`, which holds the training loop).
"""

from absl import app, flags
from ml_collections import config_flags

from transformer_jax import config_lib, training

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file.', lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, logs, vocabulary.')


def main(argv):
  config_lib.start_command(argv)
  if _WORKDIR.value is None:
    raise app.UsageError('--workdir is required')
  training.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == '__main__':
  app.run(main, flags_parser=config_lib.parse_flags)
