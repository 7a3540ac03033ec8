"""Several runs trained as one program (`train_together`, a sweep's group): the `runs.Runs` of a
group, `Group`, and the group's programs compiled ahead (`compile_ahead`).

Each workdir gets its run's config, vocabulary, checkpoints, metrics.jsonl and evaluations as
if the run had trained alone, on the batches of the first run's `data.shuffle_seed` (or seed),
which is written into every run's config. The runs differ only in `together.VARYING` and train
as one program (`together.TogetherTrainer`). What a group adds to one run:
- its runs resume together, from the newest step every run saved and can read; a newer
  checkpoint of some runs only (a group stopped between its runs' saves) is moved aside to
  `<step>.unfinished` (`<step>.corrupt` where it cannot be read) and trained again;
- runs of one label smoothing share a dev evaluator;
- a sweep passes the data it loaded for earlier groups (`data_cache`, keyed by `data_key`),
  the programs compiled for this group while the previous one trained (`compile_ahead`), the devices
  of its slot and the preemption notice its main thread entered.
"""

import contextlib
import dataclasses
import json
import threading
from typing import Any, Callable, ContextManager

from etils import epath
import jax
import ml_collections
import numpy as np

from transformer_jax.config import fields, platforms
from transformer_jax.data import datasets, pipeline, tokenizer
from transformer_jax.decoding.dev_evaluation import DevEvaluator
from transformer_jax.loop import runs, train_loop, train_metrics
from transformer_jax.model import sharding
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import buckets, workdirs
from transformer_jax.training import checkpointing, metrics_log, preemption
from transformer_jax.training import saved_config, together
from transformer_jax.training.trainer import TrainerProtocol, Trainer

# Said where a group's checkpoint is moved aside to `<step>.unfinished`.
_UNFINISHED = (' (a save of runs trained together that not every run finished, or whose step '
               'another run cannot read: they resume together from an earlier step and save '
               'this one again; the moved checkpoint may be deleted)')

# Held while data is loaded into a caller's `data_cache` (a sweep's groups side by side and its
# compiling ahead load from several threads).
_LOADING = threading.Lock()


@dataclasses.dataclass(frozen=True)
class CompiledAhead:
  """A group's `runs.Programs` compiled before it trains (`compile_ahead`), and the configs
  they were built for (their fields, flattened, as JSON)."""

  configs: str
  programs: runs.Programs


def train_together(configs: list[ml_collections.ConfigDict], dirs: list[str],
                   data_cache: dict | None = None, ahead: CompiledAhead | None = None,
                   devices: list[jax.Device] | None = None,
                   notice: preemption.Notice | None = None) -> list[dict]:
  """`train_loop.train_and_evaluate` of several runs as one program, run i in `dirs[i]`: the
  last dev metrics of each run. A NaN in any run stops them all, naming it, with every run's
  last good checkpoint kept. The configs are valid ones (`checks`). `data_cache`, a dict a
  caller keeps between calls (a sweep's groups), holds the data loaded by each (`data_key`): runs
  whose first workdir has no vocabulary yet take it from there instead of loading it again.
  `ahead`: the programs `compile_ahead` made for these configs and workdirs. `devices`: those
  they train on (default: every device); `notice`: the preemption notice to stop at, one the
  caller entered on the main thread (default: one of their own)."""
  train_loop.start(configs[0])
  group = Group(configs, dirs, {} if data_cache is None else data_cache, ahead, devices,
                notice)
  return train_loop.train(group)


def compile_ahead(configs: list[ml_collections.ConfigDict], dirs: list[str],
                  data_cache: dict, devices: list[jax.Device] | None = None
                  ) -> CompiledAhead | None:
  """The programs `train_together(configs, dirs, data_cache)` trains with, built and compiled
  now, before it starts (a sweep's next group: `sweep.ahead`): the trainer's for each shape of
  training batch, the evaluators' for the dev batches. The data comes from `data_cache`, or is
  loaded (into the first workdir, as `train_together` would, and kept in `data_cache`); on
  `devices` (default: every device). None when the runs span several processes."""
  if configs[0].parallel.distributed or jax.process_count() > 1:
    return None
  train_loop.start(configs[0])
  group = Group(configs, dirs, data_cache, None, devices, None)
  with group.locked():
    for config, workdir in zip(group.configs, dirs):
      saved_config.check_compatible(config, workdir)
    programs = group.programs()
  train = group.config.train
  programs.trainer.compile(_training_batches(group.config, programs))
  for evaluator in {id(e): e for e in programs.evaluators}.values():
    evaluator.compile(programs.trainer.run_abstract_state.params, 'validation',
                      train.num_eval_steps, train.eval_bleu)
  return CompiledAhead(group.fields, programs)


def _training_batches(config: ml_collections.ConfigDict, programs: runs.Programs) -> list[dict]:
  """A placed batch of each shape that training calls its steps with (stacked for
  `train.steps_per_call`, and single for the last steps when they do not fill a call)."""
  k = train_loop.steps_per_call(config, programs.data, lead=False)
  batcher, model = programs.data.batchers['train'], programs.model
  batches = []
  for length in batcher.train_lengths():
    sequences = batcher.sequences_per_batch(length)
    batch = batcher.assemble(length, np.full((sequences, 1) if batcher.pack_length
                                             else (sequences,), -1, np.int64))
    if k > 1:
      batches.append(model.put_batches([batch] * k))
    if k == 1 or config.train.num_train_steps % k:  # the last steps, one a call
      batches.append(model.put_batch(batch))
  return batches


def data_key(config: ml_collections.ConfigDict, sequences_multiple: int) -> str:
  """What `pipeline.load` gives depends on: the data fields but the batches' order (which the
  training iterator takes), the seed (which samples the vocabulary's text) and the batches'
  multiple of sequences."""
  data = {**config.data.to_dict(), 'shuffle_seed': None}
  return json.dumps([data, config.seed, sequences_multiple], sort_keys=True, default=str)


class Group(runs.Runs):
  """Runs trained as one program (`train_together`): a `runs.Runs`."""

  def __init__(self, configs: list[ml_collections.ConfigDict], dirs: list[str],
               data_cache: dict, ahead: CompiledAhead | None, devices: list[jax.Device] | None,
               notice: preemption.Notice | None):
    if len(set(map(buckets.absolute, dirs))) != len(dirs):
      raise ValueError(f'runs trained together need a workdir each, got {dirs}')
    self.configs = together.sharing_batches(
        [platforms.resolved(datasets.with_absolute_files(c)) for c in configs], dirs)
    self.fields = json.dumps([fields.flatten(c) for c in self.configs], sort_keys=True,
                             default=str)
    if ahead is not None and ahead.configs != self.fields:
      raise ValueError(f'the programs given to train {", ".join(dirs)} were made for other '
                       'configs')
    self.config, self.dirs, self.name = self.configs[0], dirs, ', '.join(dirs)
    self._data_cache, self._ahead = data_cache, ahead
    self._devices, self._notice = devices, notice
    self._newer = [[] for _ in dirs]

  @contextlib.contextmanager
  def locked(self):
    with contextlib.ExitStack() as locks:
      for workdir in self.dirs:
        workdirs.check_writable(workdir)
        locks.enter_context(workdirs.lock(workdir))
      yield

  def resume_step(self) -> int | None:
    """The newest step every run saved; each run's newer checkpoint (a group stopped between
    its runs' saves of one step leaves it in some workdirs only) is moved aside when the
    checkpoints open. Any other difference is refused."""
    for config, workdir in zip(self.configs, self.dirs):
      saved_config.check_compatible(config, workdir)
    saved = [checkpointing.saved_steps(workdir) for workdir in self.dirs]
    latest = max(set.intersection(*map(set, saved)), default=None)
    newest = max((step for steps in saved for step in steps), default=None)
    self._newer = [[step for step in steps if latest is None or step > latest]
                   for steps in saved]
    if any(steps not in ([], [newest]) for steps in self._newer):
      raise ValueError('runs trained together resume from one step; their latest checkpoints '
                       'are at ' + ', '.join(f'{d}: {max(s, default=None) or "none"}'
                                             for d, s in zip(self.dirs, saved))
                       + ': train them apart, or the missing ones in new workdirs')
    return latest

  def programs(self) -> runs.Programs:
    if self._ahead is not None:
      programs = self._ahead.programs
    else:
      model = ShardedModel(self.config, sharding.make_mesh(self.config, self._devices))
      # A sweep's group of one row trains as one run would.
      trainer = (Trainer(model) if len(self.configs) == 1
                 else together.TogetherTrainer(model, self.configs, self.dirs))
      data = self._load_data(trainer.sequences_multiple)
      programs = runs.Programs(model, trainer, data, self._evaluators(model, data))
    self._split = programs.trainer.split  # each run's state, to save and evaluate
    return programs

  def _load_data(self, sequences_multiple: int) -> pipeline.Data:
    """The datasets and vocabulary, from the caller's `data_cache` or loaded in the first
    workdir (and kept in `data_cache`); process 0 writes each run's config and vocabulary into
    its workdir, the other processes then read the vocabulary from there."""
    key = data_key(self.config, sequences_multiple)
    fresh = not epath.Path(self.dirs[0], tokenizer.MODEL_FILENAME).exists()

    def load():
      with _LOADING:
        if fresh and key in self._data_cache:  # its seconds were an earlier group's
          return dataclasses.replace(self._data_cache[key], seconds={'shared': 0.0})
        self._data_cache[key] = pipeline.load(self.config, self.dirs[0], sequences_multiple)
        return self._data_cache[key]

    return runs.load_data(self.configs, self.dirs, load)

  def _evaluators(self, model: ShardedModel, data: pipeline.Data) -> list[DevEvaluator]:
    """An evaluator for each run, shared by runs of one label smoothing (the only field of
    `together.VARYING` that evaluation reads: the reported loss)."""
    shared = {}
    for config in self.configs:
      smoothing = config.train.label_smoothing
      if smoothing not in shared:
        shared[smoothing] = DevEvaluator(
            model if smoothing == model.config.train.label_smoothing
            else ShardedModel(config, model.mesh), data)
    return [shared[config.train.label_smoothing] for config in self.configs]

  def open(self, cleanup: contextlib.ExitStack) -> None:
    train = self.config.train
    self._checkpoints = []
    for workdir, steps in zip(self.dirs, self._newer):
      run_checkpoints = checkpointing.Checkpoints(workdir, train.keep_checkpoints,
                                                  train.checkpoint_every_steps,
                                                  previous=len(self.dirs) > 1)
      cleanup.callback(run_checkpoints.close)
      run_checkpoints.move_aside(steps, 'unfinished', _UNFINISHED)
      self._checkpoints.append(run_checkpoints)
    self._logs = [metrics_log.MetricsLog(workdir) for workdir in self.dirs]
    for log in self._logs:
      cleanup.callback(log.close)

  def restore(self, trainer: TrainerProtocol) -> tuple[int, Any, dict] | None:
    """From the newest step every run saved whole and can read, each run's checkpoint of a newer
    step moved aside (`<step>.corrupt` where it cannot be read, `<step>.unfinished` where it can)."""
    abstract = trainer.run_abstract_state
    common = set.intersection(*(set(c.full_steps()) for c in self._checkpoints))
    for step in sorted(common, reverse=True):
      restored = [c.restore_readable(step, abstract) for c in self._checkpoints]
      if all(r is not None for r in restored):
        return step, trainer.join([state for state, _ in restored]), restored[0][1]
      for run_checkpoints, run_restored in zip(self._checkpoints, restored):
        if run_restored is None:
          run_checkpoints.move_aside([step], 'corrupt')
        else:
          run_checkpoints.move_aside([step], 'unfinished', _UNFINISHED)
    if common:
      raise RuntimeError('no checkpoint that every run trained together saved can be read by '
                         'all of them (moved aside as <step>.corrupt and <step>.unfinished)')
    return None

  def save(self, step: int, state: Any, data_state: dict) -> None:
    for run_checkpoints, run_state in zip(self._checkpoints, self._split(state)):
      run_checkpoints.save(step, run_state, data_state)

  def wait(self) -> None:
    for run_checkpoints in self._checkpoints:
      run_checkpoints.wait()

  def log(self, step: int, split: str, record: dict) -> None:
    for log in self._logs:
      log.write(step, split, record)

  def log_train(self, step: int, metrics: train_metrics.TrainMetrics) -> dict:
    summaries = metrics.summaries(self.dirs)
    for log, summary in zip(self._logs, summaries):
      log.write(step, 'train', summary)
    return summaries[0]

  def evaluate(self, step: int, state: Any, evaluators: list[DevEvaluator],
               metrics: train_metrics.TrainMetrics, write: Callable[[str], None]
               ) -> list[dict]:
    results = []
    for workdir, log, evaluator, run_state in zip(self.dirs, self._logs, evaluators,
                                                  self._split(state)):
      result = runs.evaluate_timed(evaluator, run_state.params, self.config.train, metrics,
                                   step)
      log.write(step, 'validation', result)
      runs.print_validation(write, f'{workdir}: ', step, result)
      results.append(result)
    return results

  @property
  def not_evaluated(self) -> list[dict]:
    return [{} for _ in self.dirs]

  def stop_notice(self) -> ContextManager[preemption.Notice]:
    return (preemption.Notice() if self._notice is None
            else contextlib.nullcontext(self._notice))

  def finish(self) -> None:
    """Once every save is complete (`tidy` waits for them), no earlier step to resume from is
    needed."""
    for run_checkpoints in self._checkpoints:
      run_checkpoints.tidy()
