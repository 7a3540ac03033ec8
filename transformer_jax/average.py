r"""Saves the average of a workdir's last K checkpoints as a new workdir (§6.1 averages the
last 5 checkpoints of the base model, 20 of the big one).

  python -m transformer_jax.average --workdir=DIR --average_last=5 --output=DIR_AVERAGED

The new workdir holds the config, the vocabulary and one checkpoint: the latest state with
its parameters replaced by the average, at the latest step. `translate` and `evaluate` use it
like any workdir (with --average_last=1); the original workdir is only read. (`translate` and
`evaluate` can also average in memory with --average_last=K, saving nothing.)
"""

from absl import flags

from transformer_jax import cli
from transformer_jax.training import checkpointing

_WORKDIR = flags.DEFINE_string('workdir', None, 'A training run\'s directory.', required=True)
_AVERAGE_LAST = flags.DEFINE_integer('average_last', None, 'How many of the latest '
                                     'checkpoints to average (default: '
                                     'config.decode.average_last).')
cli.renamed('last', 'average_last', 'the checkpoints averaged')
_OUTPUT = flags.DEFINE_string('output', None, 'The new workdir.', required=True)


def main():
  averaged = checkpointing.save_average(_WORKDIR.value, _AVERAGE_LAST.value, _OUTPUT.value)
  print(f'{_OUTPUT.value}: the average of checkpoints {averaged} of {_WORKDIR.value}')


if __name__ == '__main__':
  cli.run(main)
