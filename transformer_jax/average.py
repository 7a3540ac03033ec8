r"""Saves the average of a workdir's last K checkpoints as a new workdir (§6.1 averages the
last 5 checkpoints of the base model, 20 of the big one).

  python -m transformer_jax.average --workdir=DIR --average_last=5 --output=DIR_AVERAGED

The new workdir holds the config, the vocabulary and one checkpoint of the averaged parameters
(no optimizer state: an average is not trained further), at the latest averaged step.
`translate`, `evaluate` and `export` use it like any workdir (with --average_last=1); the
original workdir is only read. (`translate` and
`evaluate` can also average in memory with --average_last=K, saving nothing.)
"""

import contextlib
import os

from absl import flags
from etils import epath

from transformer_jax import cli
from transformer_jax.data import tokenizer
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic
from transformer_jax.training import checkpointing, saved_config


def save_average(workdir: str, last: int | None, output: str) -> list[int]:
  """Writes the average of `workdir`'s last `last` checkpoints to the workdir `output` and
  returns the averaged steps."""
  config = saved_config.load_config(workdir)
  last = config.decode.average_last if last is None else last
  if last <= 0:
    raise ValueError(f'--average_last must be a positive integer, got {last}')
  if epath.Path(output, 'checkpoints').is_dir() and any(
      epath.Path(output, 'checkpoints').iterdir()):
    raise FileExistsError(f'{output} already holds checkpoints; choose a new --output')
  with contextlib.closing(checkpointing.Checkpoints(workdir)) as source:
    params, averaged = source.average_last(last, ShardedModel(config).abstract_params)
  epath.Path(output).mkdir(parents=True, exist_ok=True)
  saved_config.write_config(config, output)
  atomic.copy(os.path.join(workdir, tokenizer.MODEL_FILENAME),
              os.path.join(output, tokenizer.MODEL_FILENAME))
  # `close` waits for the save.
  with contextlib.closing(checkpointing.Checkpoints(output, keep=1)) as target:
    target.save(averaged[-1], {'params': params}, None)
  return averaged


if __name__ == '__main__':
  _WORKDIR = flags.DEFINE_string('workdir', None, 'A training run\'s directory.', required=True)
  _AVERAGE_LAST = flags.DEFINE_integer('average_last', None, 'How many of the latest '
                                       'checkpoints to average (default: '
                                       'config.decode.average_last).')
  cli.renamed('last', 'average_last', 'the checkpoints averaged')
  _OUTPUT = flags.DEFINE_string('output', None, 'The new workdir.', required=True)

  def main():
    averaged = save_average(_WORKDIR.value, _AVERAGE_LAST.value, _OUTPUT.value)
    print(f'{_OUTPUT.value}: the average of checkpoints {averaged} of {_WORKDIR.value}')

  cli.run(main)
