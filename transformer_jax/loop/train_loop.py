"""Training with the paper's recipe (§5) on every available device, or on those given:
`train_and_evaluate`, the loop that trains one run or several as one program (`train_together`)
and evaluates them.

The training command (`transformer_jax.train`) calls `train_and_evaluate`; a notebook or script
calls it with a valid config (`loading.from_file('configs/base.py')`, fields overridden as
needed, then `checks.validate`) and a workdir.
Restarting with the same workdir resumes from its latest checkpoint: parameters, optimizer
state, step, dropout key and the data iterator's position are restored, so the resumed run
continues exactly as the uninterrupted one would have. Everything that can be wrong with the
input (config, workdir, mesh, dataset) is reported before anything is compiled.

The host never holds the devices up (`feed`): a background thread assembles and places the
batches a few calls ahead (`data.prefetch`), and `train.steps_per_call` steps run as one
compiled call, so the host dispatches once for all of them. Logging, checkpoints, evaluation
and preemption happen between calls.

Compiling is reported apart from training (`compilation`): each batch shape's first step
prints and logs (metrics.jsonl, split 'compile') how long its train step took to compile, or
to load from the persistent compilation cache; the 'train' records' step time and tokens/s
leave it out and give it as `compile_seconds`, and the 'validation' records give evaluation's
(and the evaluation's wall time, `seconds`).
"""

import contextlib
import dataclasses
import json
import os
import threading
import time

import jax
import ml_collections
import numpy as np
import tqdm

from transformer_jax.config import fields
from transformer_jax.data import datasets, pipeline, tokenizer
from transformer_jax.decoding.dev_evaluation import DevEvaluator
from transformer_jax.loop import train_metrics
from transformer_jax.model import partitioning
from transformer_jax.model.sharded_model import ShardedModel
from transformer_jax.storage import atomic, workdirs
from transformer_jax.training import checkpointing, compilation, feed, metrics_log, preemption
from transformer_jax.training import rows, saved_config
from transformer_jax.training.trainer import TrainerProtocol, Trainer


def _initialize_distributed(config: ml_collections.ConfigDict) -> None:
  parallel = config.parallel
  # CPU processes exchange data through gloo; accelerators use their own collectives.
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=parallel.coordinator_address,
                             num_processes=parallel.num_processes,
                             process_id=parallel.process_id)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains for `config.train.num_train_steps` steps (resuming from `workdir`) and returns
  the last dev-split metrics ({} if the run had no step left). Holds the workdir's lock
  throughout (`workdirs.lock`); on SIGTERM saves a checkpoint at the next step boundary and
  returns (`preemption`). `config` is a valid one (`checks`: checked where it enters)."""
  return train_together([config], [workdir])[0]


@dataclasses.dataclass(frozen=True)
class TrainingPrograms:
  """What runs trained together compile: their model, trainer and dev evaluators, built for
  `configs` (their fields, flattened, as JSON), and the data they were built on.
  `train_together` builds them, or takes them built and compiled already (`compile_ahead`)."""

  configs: str
  model: ShardedModel
  trainer: TrainerProtocol
  evaluators: list[DevEvaluator]
  data: pipeline.Data


def train_together(configs: list[ml_collections.ConfigDict], dirs: list[str],
                   loaded: dict | None = None, programs: TrainingPrograms | None = None,
                   devices: list[jax.Device] | None = None,
                   notice: preemption.Notice | None = None) -> list[dict]:
  """`train_and_evaluate` of several runs as one program (`rows`), run i in `dirs[i]`: each
  workdir gets its run's config, vocabulary, checkpoints, metrics.jsonl and evaluations as if
  the run had trained alone, on the batches of the first run's `data.shuffle_seed` (or seed),
  which is written into every run's config. They resume together, from one step; a NaN in any
  run stops them all, naming it, with every run's last good checkpoint kept. The configs are
  valid ones (`checks`). `loaded`, a dict that a caller keeps between calls (a sweep's groups,
  `sweep.run`), holds the data loaded by each (`data_key`): runs whose first workdir has no
  vocabulary yet take it from there instead of loading it again, its vocabulary written into
  each workdir. `programs`, those `compile_ahead` made for these configs and workdirs, are
  trained with instead of new ones, on the data they were built on. `devices`: the devices
  they train on (default: every device), as a sweep's groups side by side do (`sweep.slots`);
  `notice`: the preemption notice to stop at, one that a caller entered on the main thread
  (default: one of their own, `preemption.Notice`)."""
  if len(set(map(os.path.abspath, dirs))) != len(dirs):
    raise ValueError(f'runs trained together need a workdir each, got {dirs}')
  configs = _together(configs, dirs)
  if programs is not None and programs.configs != _fields(configs):
    raise ValueError(f'the programs given to train {", ".join(dirs)} were made for other '
                     'configs')
  compilation.use_cache(configs[0])
  if configs[0].parallel.distributed:
    _initialize_distributed(configs[0])
  with _locked(dirs):
    return _train(configs, dirs, {} if loaded is None else loaded, programs, devices, notice)


@contextlib.contextmanager
def _locked(dirs: list[str]):
  """Each workdir checked writable and locked (`workdirs.lock`) for the duration."""
  with contextlib.ExitStack() as locks:
    for workdir in dirs:
      workdirs.check_writable(workdir)
      locks.enter_context(workdirs.lock(workdir))
    yield


def _together(configs: list[ml_collections.ConfigDict], dirs: list[str]
              ) -> list[ml_collections.ConfigDict]:
  """The configs as the runs train: data files made absolute, the first run's batch order."""
  return rows.sharing_batches([datasets.with_absolute_files(c) for c in configs], dirs)


def _fields(configs: list[ml_collections.ConfigDict]) -> str:
  return json.dumps([fields.flatten(config) for config in configs], sort_keys=True, default=str)


def _model_and_trainer(configs: list[ml_collections.ConfigDict], dirs: list[str],
                       devices: list[jax.Device] | None
                       ) -> tuple[ShardedModel, TrainerProtocol]:
  model = ShardedModel(configs[0], partitioning.make_mesh(configs[0], devices))
  # One run, or several as one program (`rows`): the loop is the same for both.
  return model, (Trainer(model) if len(configs) == 1
                 else rows.RowsTrainer(model, configs, dirs))


def compile_ahead(configs: list[ml_collections.ConfigDict], dirs: list[str],
                  loaded: dict, devices: list[jax.Device] | None = None) -> TrainingPrograms | None:
  """The programs `train_together(configs, dirs, loaded)` trains with, built and compiled now,
  before it starts (a sweep's groups: `sweep.ahead`): the trainer's for each shape of training
  batch, the evaluators' for the dev batches it evaluates on. The data comes from `loaded`, or
  is loaded (into the first workdir, as `train_together` would, and kept in `loaded`); on
  `devices` (default: every device). None when the runs span several processes."""
  if configs[0].parallel.distributed or jax.process_count() > 1:
    return None
  configs = _together(configs, dirs)
  compilation.use_cache(configs[0])
  model, trainer = _model_and_trainer(configs, dirs, devices)
  with _locked(dirs):
    for config, workdir in zip(configs, dirs):
      saved_config.check_compatible(config, workdir)
    data = _load_data(configs, dirs, trainer.rows_multiple, loaded)
  config = configs[0]
  train = config.train
  k, batcher = _steps_per_call(config, data, lead=False), data.batchers['train']
  batches = []
  for length in batcher.train_lengths():
    rows_in_batch = batcher.rows(length)
    batch = batcher.assemble(length, np.full((rows_in_batch, 1) if batcher.pack_length
                                             else (rows_in_batch,), -1, np.int64))
    if k > 1:
      batches.append(model.put_batches([batch] * k))
    if k == 1 or train.num_train_steps % k:  # the last steps, one a call
      batches.append(model.put_batch(batch))
  trainer.compile(batches)
  evaluators = _evaluators(configs, model, data)
  for evaluator in {id(e): e for e in evaluators}.values():
    evaluator.compile(trainer.run_abstract_state.params, 'validation', train.num_eval_steps,
                      train.eval_bleu)
  return TrainingPrograms(_fields(configs), model, trainer, evaluators, data)


def data_key(config: ml_collections.ConfigDict, rows_multiple: int) -> str:
  """What `pipeline.load` gives depends on: the data fields but the batches' order (which the
  training iterator takes), the seed (which samples the vocabulary's text) and the batches'
  multiple of rows."""
  data = {**config.data.to_dict(), 'shuffle_seed': None}
  return json.dumps([data, config.seed, rows_multiple], sort_keys=True, default=str)


# Held while data is loaded into a caller's `loaded` (a sweep's groups side by side and its
# compiling ahead load from several threads).
_LOADING = threading.Lock()


def _load_data(configs: list[ml_collections.ConfigDict], dirs: list[str], rows_multiple: int,
               loaded: dict) -> pipeline.Data:
  """The datasets and vocabulary (from `loaded`, or `pipeline.load` in the first workdir, kept
  in `loaded`); process 0 learns the vocabulary and writes each run's config (and vocabulary)
  into its workdir, the other processes then read the vocabulary from there."""
  key = data_key(configs[0], rows_multiple)
  fresh = not os.path.exists(os.path.join(dirs[0], tokenizer.MODEL_FILENAME))

  def load():
    with _LOADING:
      return load_once()

  def load_once():
    if fresh and key in loaded:  # loaded for an earlier call: its seconds are not this one's
      return dataclasses.replace(loaded[key], seconds={'shared': 0.0})
    loaded[key] = pipeline.load(configs[0], dirs[0], rows_multiple)
    return loaded[key]

  def load_and_save():
    data = load()
    for config, workdir in zip(configs, dirs):
      saved_config.write_config(config, workdir)
      vocabulary = os.path.join(workdir, tokenizer.MODEL_FILENAME)
      if not config.data.spm_model and not os.path.exists(vocabulary):
        with atomic.replacing(vocabulary) as temporary, open(temporary, 'wb') as f:
          f.write(data.tokenizer.serialized_model_proto())
    return data

  data = workdirs.on_lead(load_and_save, 'prepare the data and vocabulary')
  return data if jax.process_index() == 0 else load()


def _resume_step(dirs: list[str]) -> tuple[int | None, list[list[int]]]:
  """The step the runs resume from, the newest that every run saved (None: from scratch), and
  each run's newer checkpoints: a group stopped between its runs' saves of one step leaves that
  step, the newest of any run, in some workdirs only, and trains it again. Runs trained together
  resume from one step: any other difference is refused before any work."""
  saved = [checkpointing.saved_steps(workdir) for workdir in dirs]
  latest = max(set.intersection(*map(set, saved)), default=None)
  newest = max((step for steps in saved for step in steps), default=None)
  newer = [[step for step in steps if latest is None or step > latest] for steps in saved]
  if any(steps not in ([], [newest]) for steps in newer):
    raise ValueError('runs trained together resume from one step; their latest checkpoints '
                     'are at ' + ', '.join(f'{d}: {max(s, default=None) or "none"}'
                                           for d, s in zip(dirs, saved))
                     + ': train them apart, or the missing ones in new workdirs')
  return latest, newer


# Said where a group's checkpoint is moved aside to `<step>.unfinished`.
_UNFINISHED = (' (a save of runs trained together that not every run finished, or whose step '
               'another run cannot read: they resume together from an earlier step and save '
               'this one again; the moved checkpoint may be deleted)')


def _restore(checkpoints: list[checkpointing.Checkpoints], trainer: TrainerProtocol):
  """(step, state, data position) of the runs' latest checkpoints, joined into the trainer's
  state; None when there are none. One run resumes from its newest readable checkpoint
  (`Checkpoints.restore_latest`); runs trained together from the newest step that every run
  saved and can read, each run's checkpoint of a newer step moved aside (`<step>.corrupt` where
  it cannot be read, `<step>.unfinished` where it can)."""
  abstract = trainer.run_abstract_state
  if len(checkpoints) == 1:
    restored = checkpoints[0].restore_latest(abstract)
    return None if restored is None else (restored[0], trainer.join([restored[1]]), restored[2])
  common = set.intersection(*(set(c.all_steps()) for c in checkpoints))
  for step in sorted(common, reverse=True):
    restored = [c.restore_readable(step, abstract) for c in checkpoints]
    if all(r is not None for r in restored):
      return step, trainer.join([state for state, _ in restored]), restored[0][1]
    for run_checkpoints, run_restored in zip(checkpoints, restored):
      if run_restored is None:
        run_checkpoints.move_aside([step], 'corrupt')
      else:
        run_checkpoints.move_aside([step], 'unfinished', _UNFINISHED)
  if common:
    raise RuntimeError('no checkpoint that every run trained together saved can be read by '
                       'all of them (moved aside as <step>.corrupt and <step>.unfinished)')
  return None


def _train(configs: list[ml_collections.ConfigDict], dirs: list[str], loaded: dict,
           programs: TrainingPrograms | None, devices: list[jax.Device] | None,
           notice: preemption.Notice | None) -> list[dict]:
  startup = compilation.so_far()
  config = configs[0]
  lead = jax.process_index() == 0
  for run_config, workdir in zip(configs, dirs):
    saved_config.check_compatible(run_config, workdir)
  latest, unfinished = _resume_step(dirs)
  if latest is not None and latest >= config.train.num_train_steps:
    if lead:
      print(f'{", ".join(dirs)}: complete, trained to step {latest} of '
            f'train.num_train_steps={config.train.num_train_steps}: nothing to do (raise '
            'train.num_train_steps to train further)', flush=True)
    return [{} for _ in dirs]
  if programs is None:
    model, trainer = _model_and_trainer(configs, dirs, devices)
    data = _load_data(configs, dirs, trainer.rows_multiple, loaded)
  else:
    model, trainer, data = programs.model, programs.trainer, programs.data
  labels = [f'{workdir}: ' if len(dirs) > 1 else '' for workdir in dirs]

  train = config.train
  # Closed in reverse order however the run ends: the progress bar, the metrics logs, then the
  # checkpoints (`close` waits for the saves under way).
  with contextlib.ExitStack() as cleanup:
    checkpoints = _checkpoints(dirs, unfinished, train, cleanup)
    iterator = data.train_iterator(fields.shuffle_seed(config), jax.process_index(),
                                   jax.process_count())
    cleanup.callback(iterator.close)
    restored = _restore(checkpoints, trainer)
    if restored is None:
      start, state = 0, trainer.init_state()
    else:
      start, state, data_state = restored
      iterator.set_state(data_state)
      if lead:
        print(f'Resumed from step {start} of {", ".join(dirs)}', flush=True)
    calls = cleanup.enter_context(feed.Feed(
        iterator, model, _steps_per_call(config, data, lead), start, train.num_train_steps,
        config.data.prefetch))
    evaluators = (_evaluators(configs, model, data) if programs is None
                  else programs.evaluators)
    logs = [metrics_log.MetricsLog(workdir) for workdir in dirs]
    for log in logs:
      cleanup.callback(log.close)
      log.write(start, 'data', data.seconds)
    if lead:
      print(f'step {start}: data loaded: {pipeline.loading(data.seconds)}', flush=True)
    _log_compiles(logs, start, 'startup', compilation.so_far() - startup)
    progress = tqdm.tqdm(total=train.num_train_steps, initial=start, disable=not lead,
                         unit='step', dynamic_ncols=True)
    cleanup.callback(progress.close)
    pending = train_metrics.TrainMetrics(progress)
    eval_metrics = [{} for _ in dirs]
    with (preemption.Notice() if notice is None else contextlib.nullcontext(notice)) as notice:
      for call in calls:
        step = call.steps[-1]
        before = compilation.so_far()
        if len(call.steps) == 1:
          state, metrics = trainer.train_step(state, call.batch)
        else:
          state, metrics = trainer.train_steps(state, call.batch)
        compiled = compilation.so_far() - before  # a new batch shape: its step compiled
        if compiled:
          pending.compiled(compiled.seconds)
          _log_compiles(logs, step, f'train step, batches of {call.shape}', compiled,
                        progress.write)
        pending.add(call.steps, metrics)
        progress.update(len(call.steps))
        last = step == train.num_train_steps
        preempted = notice.reached(step)
        save = step % train.checkpoint_every_steps == 0 or last or preempted
        evaluate_now = (step % train.eval_every_steps == 0 or last) and not preempted
        # A multiple of log_every_steps among the call's steps.
        logged = step // train.log_every_steps > (call.steps[0] - 1) // train.log_every_steps
        # Fetching the metrics checks the steps for NaN, so no bad state is saved or evaluated.
        if logged or save or evaluate_now:
          summaries = pending.summaries(dirs)
          for log, summary in zip(logs, summaries):
            log.write(step, 'train', summary)
          progress.set_postfix(loss=f'{summaries[0]["loss"]:.3f}',
                               lr=f'{summaries[0]["learning_rate"]:.2e}',
                               tok_s=f'{summaries[0]["target_tokens_per_second"]:.0f}')
        # Saved before evaluating, so that a failed evaluation loses no training.
        if save:
          with pending.paused():
            for run_checkpoints, run_state in zip(checkpoints, trainer.split(state)):
              run_checkpoints.save(step, run_state, calls.get_state())
        if evaluate_now:
          eval_metrics = _evaluate(evaluators, trainer.split(state), train, pending)
          for label, log, metrics in zip(labels, logs, eval_metrics):
            log.write(step, 'validation', metrics)
            if lead:
              progress.write(label + f'step {step} validation ' + ' '.join(
                  f'{name}={value:.4g}' for name, value in metrics.items()))
        if preempted:
          for run_checkpoints in checkpoints:
            run_checkpoints.wait()
          if lead:
            progress.write(f'Preempted (SIGTERM): saved step {step} in {", ".join(dirs)}; run '
                           'the same command again to resume')
          break
    if len(dirs) > 1:  # every save complete: no earlier step to resume from is needed
      for run_checkpoints in checkpoints:
        run_checkpoints.tidy()
    _log_compiles(logs, progress.n, 'the whole run', compilation.so_far() - startup,
                  progress.write)
  return eval_metrics


def _checkpoints(dirs: list[str], unfinished: list[list[int]], train: ml_collections.ConfigDict,
                 cleanup: contextlib.ExitStack) -> list[checkpointing.Checkpoints]:
  """Each run's checkpoints, closed by `cleanup` (which waits for the saves under way), its
  `unfinished` ones (a save not every run made, `_resume_step`) moved aside."""
  checkpoints = []
  for workdir, steps in zip(dirs, unfinished):
    run_checkpoints = checkpointing.Checkpoints(workdir, train.keep_checkpoints,
                                                train.checkpoint_every_steps,
                                                previous=len(dirs) > 1)
    cleanup.callback(run_checkpoints.close)
    run_checkpoints.move_aside(steps, 'unfinished', _UNFINISHED)
    checkpoints.append(run_checkpoints)
  return checkpoints


def _evaluate(evaluators: list[DevEvaluator], states: list, train: ml_collections.ConfigDict,
              pending: train_metrics.TrainMetrics) -> list[dict]:
  """Each run's dev-split metrics for its state (`DevEvaluator`), with the evaluation's
  seconds and compiling seconds; the training's clock paused meanwhile."""
  results = []
  for evaluator, state in zip(evaluators, states):
    with pending.paused():
      before, start = compilation.so_far(), time.perf_counter()
      metrics = evaluator(state.params, 'validation', train.num_eval_steps, train.eval_bleu)
      metrics.update(seconds=time.perf_counter() - start,
                     compile_seconds=(compilation.so_far() - before).seconds)
    results.append(metrics)
  return results


def _evaluators(configs: list[ml_collections.ConfigDict], model: ShardedModel,
                data: pipeline.Data) -> list[DevEvaluator]:
  """An evaluator for each run, shared by runs of one label smoothing (the only field of
  `rows.VARYING` that evaluation reads: the reported loss)."""
  shared = {}
  for config in configs:
    smoothing = config.train.label_smoothing
    if smoothing not in shared:
      shared[smoothing] = DevEvaluator(
          model if smoothing == model.config.train.label_smoothing
          else ShardedModel(config, model.mesh), data)
  return [shared[config.train.label_smoothing] for config in configs]


def _steps_per_call(config: ml_collections.ConfigDict, data: pipeline.Data, lead: bool) -> int:
  """`train.steps_per_call`, or 1 when training batches come in several shapes (they cannot be
  stacked), said on process 0."""
  k, lengths = config.train.steps_per_call, data.batchers['train'].train_lengths()
  if k > 1 and len(lengths) > 1:
    if lead:
      print(f'train.steps_per_call={k} runs one step a call: training batches have rows of '
            f'{len(lengths)} lengths ({", ".join(map(str, lengths))}); with '
            'data.pack_length=data.max_length they have one', flush=True)
    return 1
  return k


def _log_compiles(logs: list[metrics_log.MetricsLog], step: int, what: str,
                  compiled: compilation.CompileStats, write=print) -> None:
  """Records in each metrics.jsonl, and prints on process 0, what `what` compiled at `step`."""
  for log in logs:
    log.write(step, 'compile', {'what': what, 'seconds': compiled.seconds,
                                'compiled': compiled.compiled, 'loaded': compiled.loaded})
  if jax.process_index() == 0:
    write(f'step {step}: {what}: {compiled.describe()}')
