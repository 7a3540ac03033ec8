"""What the training loop trains and where it writes: `Runs`, the interface, and `OneRun`, one
run in one workdir (the other kind, several runs trained as one program, is
`loop.runs_together.Group`).

The loop (`loop.train_loop`) tells one run's story, build, restore, step, log, save, evaluate,
stop, and calls a `Runs` for everything that depends on how many runs share the program: their
workdirs' locks, their checkpoints, their metrics logs and their evaluation. `OneRun` does each
of those for its one workdir in a few lines.
"""

import contextlib
import dataclasses
import time
from typing import Any, Callable, ContextManager, Protocol

from etils import epath
import jax
import ml_collections

from transformer_jax.config import platforms
from transformer_jax.data import datasets, pipeline, tokenizer
from transformer_jax.decoding.dev_evaluation import DevEvaluator
from transformer_jax.loop import train_metrics
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, workdirs
from transformer_jax.training import checkpointing, compilation, metrics_log, preemption
from transformer_jax.training import saved_config
from transformer_jax.training.trainer import TrainerProtocol, Trainer


@dataclasses.dataclass(frozen=True)
class Programs:
  """What the loop trains with: the model on its mesh, the trainer (its compiled steps), the
  data and vocabulary, and the dev evaluator of each run."""

  model: ShardedModel
  trainer: TrainerProtocol
  data: pipeline.Data
  evaluators: list[DevEvaluator]


class Runs(Protocol):
  """What the training loop needs of the runs it trains (one, `OneRun`, or a group,
  `runs_together.Group`); the loop's body is the same for both.

    config   the config every run shares (model, data, schedule; the first run's)
    name     the workdirs, for messages
  """

  config: ml_collections.ConfigDict
  name: str

  def locked(self) -> ContextManager[None]:
    """Each workdir checked writable and locked (`workdirs.lock`) for the duration."""

  def resume_step(self) -> int | None:
    """The step training resumes from (None: from scratch); raises before any work when a
    workdir holds a run of another config (`saved_config.check_compatible`)."""

  def programs(self) -> Programs:
    """The model, trainer, data and evaluators, built (or taken compiled ahead); each run's
    config and vocabulary written into its workdir."""

  def open(self, cleanup: contextlib.ExitStack) -> None:
    """Opens each run's checkpoints and metrics log, closed by `cleanup` (which waits for the
    saves under way)."""

  def restore(self, trainer: TrainerProtocol) -> tuple[int, Any, dict] | None:
    """(step, state, data iterator's position) of the latest checkpoint, as `trainer`'s state;
    None when there is none."""

  def save(self, step: int, state: Any, data_state: dict) -> None:
    """Starts saving `state` at `step` (orbax writes in the background)."""

  def wait(self) -> None:
    """Waits for the saves under way."""

  def log(self, step: int, split: str, record: dict) -> None:
    """Writes `record` into every run's metrics log."""

  def log_train(self, step: int, metrics: train_metrics.TrainMetrics) -> dict:
    """Writes each run's training summary since the last (`TrainMetrics.summaries`, which
    stops on a NaN); returns the first run's, for the progress bar."""

  def evaluate(self, step: int, state: Any, evaluators: list[DevEvaluator],
               metrics: train_metrics.TrainMetrics, write: Callable[[str], None]) -> Any:
    """Evaluates each run's parameters on the dev split with its evaluator (`Programs`),
    logs and prints (`write`) the figures; returns them in `not_evaluated`'s form."""

  @property
  def not_evaluated(self) -> Any:
    """What the loop returns when nothing was evaluated: {} of each run."""

  def stop_notice(self) -> ContextManager[preemption.Notice]:
    """The preemption notice the loop stops at, entered for the duration."""

  def finish(self) -> None:
    """Called once training has ended (saves may still be under way)."""


def evaluate_timed(evaluator: DevEvaluator, params, train: ml_collections.ConfigDict,
                   metrics: train_metrics.TrainMetrics, step: int) -> dict:
  """`evaluator`'s dev-split metrics of `params` at `step` (BLEU where `decodes_bleu`), with
  the evaluation's seconds and compiling seconds; the training's clock paused meanwhile."""
  with metrics.paused():
    before, start = compilation.so_far(), time.perf_counter()
    result = evaluator(params, 'validation', train.num_eval_steps, decodes_bleu(train, step))
    result.update(seconds=time.perf_counter() - start,
                  compile_seconds=(compilation.so_far() - before).seconds)
  return result


def decodes_bleu(train: ml_collections.ConfigDict, step: int) -> bool:
  """Whether the dev evaluation at `step` decodes BLEU: at multiples of
  `train.bleu_every_steps` and at the last step, unless `train.eval_bleu` is off."""
  return train.eval_bleu and (step % train.bleu_every_steps == 0
                              or step == train.num_train_steps)


def write_config_and_vocabulary(config: ml_collections.ConfigDict, workdir: str,
                                data: pipeline.Data) -> None:
  """`workdir/config.json`, and the vocabulary learned or read from `config.data.prepared` as
  `workdir/spm.model` unless the config names one or it is there already; ValueError where the
  one there is another (the workdir's run trained on other ids)."""
  saved_config.write_config(config, workdir)
  if config.data.spm_model:
    return  # write_config copied it
  vocabulary = epath.Path(workdir, tokenizer.MODEL_FILENAME)
  proto = data.tokenizer.serialized_model_proto()
  if not vocabulary.exists():
    with atomic.replacing(str(vocabulary)) as temporary, open(temporary, 'wb') as f:
      f.write(proto)
  elif config.data.prepared and tokenizer.load(str(vocabulary)).serialized_model_proto() != proto:
    raise ValueError(f'{vocabulary} is not the vocabulary of config.data.prepared='
                     f'{config.data.prepared}: its run trained on other token ids; use a new '
                     '--workdir')


def load_data(configs: list[ml_collections.ConfigDict], dirs: list[str],
              load: Callable[[], pipeline.Data]) -> pipeline.Data:
  """`load()` on process 0, which learns the vocabulary, each run's config and vocabulary then
  written into its workdir; the other processes `load()` after it (reading the vocabulary from
  the first workdir). With `config.data.prepared`, every process `load()`s from there at once
  (none prepares or waits for another's preparation), then process 0 writes the configs and
  vocabularies."""
  def write(data):
    for config, workdir in zip(configs, dirs):
      write_config_and_vocabulary(config, workdir, data)
    return data

  if configs[0].data.prepared:
    data = load()
    workdirs.on_process_zero(lambda: write(data), 'write the config and vocabulary')
    return data
  data = workdirs.on_process_zero(lambda: write(load()), 'prepare the data and vocabulary')
  return data if jax.process_index() == 0 else load()


def print_validation(write: Callable[[str], None], label: str, step: int, metrics: dict) -> None:
  """Prints a dev evaluation on process 0."""
  if jax.process_index() == 0:
    write(label + f'step {step} validation ' + ' '.join(
        f'{name}={value:.4g}' for name, value in metrics.items()))


class OneRun(Runs):
  """One run: `config` (a valid one, `checks`) trained in `workdir` on every device."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str):
    # Every 'auto' resolved for this platform, so that config.json records what the run uses.
    self.config = platforms.resolved(datasets.with_absolute_files(config))
    self.workdir = workdir
    self.name = workdir

  def locked(self) -> ContextManager[None]:
    workdirs.check_writable(self.workdir)
    return workdirs.lock(self.workdir)

  def resume_step(self) -> int | None:
    saved_config.check_compatible(self.config, self.workdir)
    return max(checkpointing.saved_steps(self.workdir), default=None)

  def programs(self) -> Programs:
    model = ShardedModel(self.config)  # on every device
    trainer = Trainer(model)
    data = load_data([self.config], [self.workdir], lambda: pipeline.load(
        self.config, self.workdir, trainer.sequences_multiple))
    return Programs(model, trainer, data, [DevEvaluator(model, data)])

  def open(self, cleanup: contextlib.ExitStack) -> None:
    train = self.config.train
    self._checkpoints = checkpointing.Checkpoints(self.workdir, train.keep_checkpoints,
                                                  train.checkpoint_every_steps)
    cleanup.callback(self._checkpoints.close)
    self._log = metrics_log.MetricsLog(self.workdir)
    cleanup.callback(self._log.close)

  def restore(self, trainer: TrainerProtocol) -> tuple[int, Any, dict] | None:
    return self._checkpoints.restore_latest(trainer.run_abstract_state)

  def save(self, step: int, state: Any, data_state: dict) -> None:
    self._checkpoints.save(step, state, data_state)

  def wait(self) -> None:
    self._checkpoints.wait()

  def log(self, step: int, split: str, record: dict) -> None:
    self._log.write(step, split, record)

  def log_train(self, step: int, metrics: train_metrics.TrainMetrics) -> dict:
    (summary,) = metrics.summaries([self.workdir])
    self._log.write(step, 'train', summary)
    return summary

  def evaluate(self, step: int, state: Any, evaluators: list[DevEvaluator],
               metrics: train_metrics.TrainMetrics, write: Callable[[str], None]) -> dict:
    (evaluator,) = evaluators
    result = evaluate_timed(evaluator, state.params, self.config.train, metrics, step)
    self._log.write(step, 'validation', result)
    print_validation(write, '', step, result)
    return result

  @property
  def not_evaluated(self) -> dict:
    return {}

  def stop_notice(self) -> ContextManager[preemption.Notice]:
    return preemption.Notice()

  def finish(self) -> None:
    pass
