"""Training with the paper's recipe (§5): `train_and_evaluate(config, workdir)`, the loop the
training command runs.

  metrics = train_loop.train_and_evaluate(loading.from_file('configs/base.py'), '/tmp/base')

One run's story, top to bottom: build the model, trainer and data (`runs.OneRun.programs`),
restore the latest checkpoint, then step, log, save, evaluate and stop (`_train_calls`).
Restarting with the same workdir resumes from its latest checkpoint: parameters, optimizer
state, step, dropout key and the data iterator's position, so the resumed run continues exactly
as the uninterrupted one would have. Everything that can be wrong with the input (config,
workdir, mesh, dataset) is reported before anything is compiled. A NaN stops training with the
last good checkpoint kept (`train_metrics`); SIGTERM or Ctrl-C saves at the next step boundary
and returns (`preemption`).

The loop reaches the workdir only through a `runs.Runs`: one run (`runs.OneRun`) or several trained
as one program (`runs_together.Group`, `runs_together.train_together`), so its body is the same for
both.

The host never holds the devices up (`feed`): a background thread assembles and places the
batches a few calls ahead (`data.prefetch`), and `train.steps_per_call` steps run as one compiled
call. Compiling is reported apart from training (`compilation`): each batch shape's first step
logs (metrics.jsonl, split 'compile') how long it took to compile or to load from the persistent
compilation cache; the 'train' records' step time and tokens/s leave it out.
"""

import contextlib
from typing import Any, Callable

import jax
import ml_collections
import tqdm

from transformer_jax.config import fields
from transformer_jax.data import pipeline, prepared
from transformer_jax.loop import runs, train_metrics
from transformer_jax.training import compilation, feed


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains `config` (a valid one, `checks`) for `config.train.num_train_steps` steps in
  `workdir`, resuming from its latest checkpoint, and returns the last dev-split metrics ({} if
  the run had no step left). Holds the workdir's lock throughout (`workdirs.lock`)."""
  start(config)
  return train(runs.OneRun(config, workdir))


def start(config: ml_collections.ConfigDict) -> None:
  """What a process does before it builds a run of `config`: JAX's compilation cache, and with
  `parallel.distributed` the job of several processes joined, before JAX's backends start
  (resolving the platform's defaults starts them: `platforms.current`)."""
  compilation.use_cache(config)
  if config.parallel.distributed and not jax.distributed.is_initialized():
    _initialize_distributed(config)


def train(trained: runs.Runs) -> Any:
  """Trains `trained` (one run, or a group, built after `start`) to `num_train_steps`; its last
  dev metrics."""
  with trained.locked():
    return _train(trained)


def _initialize_distributed(config: ml_collections.ConfigDict) -> None:
  parallel = config.parallel
  # CPU processes exchange data through gloo; accelerators use their own collectives.
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(coordinator_address=parallel.coordinator_address,
                             num_processes=parallel.num_processes,
                             process_id=parallel.process_id)


def _train(trained: runs.Runs) -> Any:
  """Builds, restores and trains; closes the progress bar, the metrics logs and then the
  checkpoints (waiting for the saves under way) however training ends."""
  startup = compilation.so_far()
  config, lead = trained.config, jax.process_index() == 0
  latest = trained.resume_step()
  if latest is not None and latest >= config.train.num_train_steps:
    if lead:
      print(f'{trained.name}: complete, trained to step {latest} of '
            f'train.num_train_steps={config.train.num_train_steps}: nothing to do (raise '
            'train.num_train_steps to train further)', flush=True)
    return trained.not_evaluated
  prepared.check(config)  # a config.data.prepared missing or for other data, before any work
  programs = trained.programs()
  with contextlib.ExitStack() as cleanup:
    trained.open(cleanup)
    iterator = programs.data.train_iterator(fields.shuffle_seed(config), jax.process_index(),
                                            jax.process_count())
    cleanup.callback(iterator.close)
    start, state = _restore(trained, programs, iterator)
    calls = cleanup.enter_context(feed.Feed(
        iterator, programs.model, steps_per_call(config, programs.data, lead), start,
        config.train.num_train_steps, config.data.prefetch))
    trained.log(start, 'data', programs.data.seconds)
    if lead:
      print(f'step {start}: data loaded: {pipeline.loading(programs.data.seconds)}', flush=True)
    _log_compiles(trained, start, 'startup', compilation.so_far() - startup)
    progress = tqdm.tqdm(total=config.train.num_train_steps, initial=start, disable=not lead,
                         unit='step', dynamic_ncols=True)
    cleanup.callback(progress.close)
    with trained.stop_notice() as notice:
      evaluated = _train_calls(trained, programs, state, calls, notice, progress)
    trained.finish()
    _log_compiles(trained, progress.n, 'the whole run', compilation.so_far() - startup,
                  progress.write)
  return evaluated


def _restore(trained: runs.Runs, programs: runs.Programs, iterator) -> tuple[int, Any]:
  """(step, state) to start from: the latest checkpoint's, the iterator moved to its
  position, or step 0's."""
  restored = trained.restore(programs.trainer)
  if restored is None:
    return 0, programs.trainer.init_state()
  start, state, data_state = restored
  iterator.set_state(data_state)
  if jax.process_index() == 0:
    print(f'Resumed from step {start} of {trained.name}', flush=True)
  return start, state


def _train_calls(trained: runs.Runs, programs: runs.Programs, state: Any, calls: feed.Feed,
                 notice, progress: tqdm.tqdm) -> Any:
  """The loop: each call runs its steps, then logs, saves and evaluates at their intervals;
  stops after the last step, or saved at a preemption notice. Returns the last evaluation."""
  settings, trainer = trained.config.train, programs.trainer
  metrics = train_metrics.TrainMetrics(progress)
  evaluated = trained.not_evaluated
  for call in calls:
    step = call.steps[-1]
    before = compilation.so_far()
    state, step_metrics = (trainer.train_step(state, call.batch) if len(call.steps) == 1
                           else trainer.train_steps(state, call.batch))
    compiled = compilation.so_far() - before  # a new batch shape: its step compiled
    if compiled:
      metrics.compiled(compiled.seconds)
      _log_compiles(trained, step, f'train step, batches of {call.shape}', compiled,
                    progress.write)
    metrics.add(call.steps, step_metrics)
    progress.update(len(call.steps))
    last = step == settings.num_train_steps
    preempted = notice.reached(step)
    save = step % settings.checkpoint_every_steps == 0 or last or preempted
    evaluate = (step % settings.eval_every_steps == 0 or last) and not preempted
    # A multiple of log_every_steps among the call's steps.
    logged = step // settings.log_every_steps > (call.steps[0] - 1) // settings.log_every_steps
    # Fetching the metrics checks the steps for NaN, so no bad state is saved or evaluated.
    if logged or save or evaluate:
      summary = trained.log_train(step, metrics)
      progress.set_postfix(loss=f'{summary["loss"]:.3f}', lr=f'{summary["learning_rate"]:.2e}',
                           tok_s=f'{summary["target_tokens_per_second"]:.0f}')
    if save:  # before evaluating, so that a failed evaluation loses no training
      with metrics.paused():
        trained.save(step, state, calls.get_state())
    if evaluate:
      evaluated = trained.evaluate(step, state, programs.evaluators, metrics, progress.write)
    if preempted:
      _stop(trained, step, notice.reason, progress.write)
      break
  return evaluated


def _stop(trained: runs.Runs, step: int, reason: str, write: Callable[[str], None]) -> None:
  """At a preemption notice: waits for the step's save and says why it stopped and how to
  resume."""
  trained.wait()
  if jax.process_index() == 0:
    write(f'{reason}: saved step {step} in {trained.name}; run the same command again to '
          'resume')


def steps_per_call(config: ml_collections.ConfigDict, data: pipeline.Data, lead: bool) -> int:
  """`train.steps_per_call`, or 1 when training batches come in several shapes (they cannot be
  stacked), said on process 0."""
  k, lengths = config.train.steps_per_call, data.batchers['train'].train_lengths()
  if k > 1 and len(lengths) > 1:
    if lead:
      print(f'train.steps_per_call={k} runs one step a call: training batches have sequences of '
            f'{len(lengths)} lengths ({", ".join(map(str, lengths))}); with '
            'data.pack_length=data.max_length they have one', flush=True)
    return 1
  return k


def _log_compiles(trained: runs.Runs, step: int, what: str, compiled: compilation.CompileStats,
                  write: Callable[[str], None] = print) -> None:
  """Records in each metrics.jsonl, and prints on process 0, what `what` compiled at `step`."""
  trained.log(step, 'compile', {'what': what, 'seconds': compiled.seconds,
                                'compiled': compiled.compiled, 'loaded': compiled.loaded})
  if jax.process_index() == 0:
    write(f'step {step}: {what}: {compiled.describe()}')
