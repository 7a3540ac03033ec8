r"""The `sweep` command: runs the rows of a sweep file in this process, in groups trained and
evaluated as one program, and tabulates them beside the paper's figures.

  python -m transformer_jax.sweep --sweep=experiments/table3_multi30k/sweep.py --workdir=DIR \
      [--rows=A1,C3] [--results=experiments/table3_multi30k/rows] [--together=N] \
      [--devices_per_group=d] [--process_index=i --process_count=N] [--stop_after_minutes=M] \
      [--override=dtype=bfloat16 --override=train.grad_accum_steps=2 ...] [--dry_run]

A sweep file is a config file whose `get_config(row)` gives each row's config, with
    ROWS   the row ids, in table order (a dict or a sequence);
    PAPER  optional: {row: (perplexity, BLEU)}, the published figures to print beside ours.
docs/training.md shows a sweep file of your own rows (a grid of two fields, seeds) in a dozen
lines.
`--dry_run` checks every row's config (as before training), prints each row's fields that
differ from the first row's and the plan (below), and stops: nothing is trained or written.
Each row trains in `DIR/<row>` and is then evaluated on the dev split as Table 3 was: beam 4,
α 0.6, no checkpoint averaging, per-token perplexity (`sweep.group`). Its figures, with the dev
perplexities logged during training, go to `<results>/<row>.json` (default `DIR/rows/`); a row
whose JSON exists is skipped, so a crashed, killed or interrupted sweep resumes where it stopped
(the group in flight from its last checkpoint), and committed JSON files let a fresh machine
resume too. After every group the table is rewritten, named after the sweep file
(`sweep.results`): `DIR/table3_multi30k.md`, `.csv` and `.png` for
experiments/table3_multi30k/sweep.py.

`--override=FIELD=VALUE` sets a config field in every row, as `--config.FIELD=VALUE` does for
`train` (precision, memory, devices: what should not change a row's result, though nothing
stops it); each is checked against every row before anything trains, and a row's JSON lists the
overrides it ran with.

`--together=N` trains up to N rows as one compiled program (the train step vmapped over the
rows' states, `transformer_jax.training.together`), rows that may share one: they differ only in the
seed, the dropout rates, label smoothing, `train.lr_scale` or `train.warmup_steps`
(`together.VARYING`; the seeds of one row, or Table 3's base and D rows), and evaluates them as one
program (their parameters stacked, the decoder vmapped: `translator.GroupTranslator`). Groups are
formed in row order (`sweep.plan.groups`); a row that fits no group trains alone. A group's rows
see the same batches, those of its first row's seed (written into each row's config as
`data.shuffle_seed`, so each workdir resumes alone as it trained): seeds then vary the
initialisation and dropout, not the data order. Each row keeps its workdir, evaluation and JSON
(which names the group); the group's training time is every row's `train_seconds`.

`--devices_per_group=d` splits the process's D devices into D/d slots (default: one slot of
them all): each slot trains its groups one after another on its own d devices, the slots side by
side, each group's data parallel over its slot (`config.parallel`'s mesh of d devices). Table 3's
small models leave an accelerator launch-bound, so on 8 devices `--devices_per_group=1` trains 8
groups in about the time one takes over all 8. A row's figures do not depend on its slot: each
equals its group trained alone on d devices.

`--process_index=i --process_count=N` shares the sweep among N processes, on one host or several
(a pod, a cluster), each started with the same command and its own index (on SLURM,
`--process_index=$SLURM_PROCID --process_count=$SLURM_NTASKS`), the workdir and results
directory on a file system they all see, with flock across them (docs/training.md). Each
process's slots take, in the plan's order, the next group that no process holds
(`sweep.claims`: a group's claim dies with its process) and none has finished; with none left,
they wait for the groups others hold, and take over those whose process ends. So processes
killed at any moment and started again, all of them or any one alone, finish every row, each
trained by one process at a time, and the table is written once, by the process that ends
last. The first start records the groups and what the processes must agree on
(`DIR/shared_sweep.json`); a process whose sweep file, rows, `--together`, `--process_count`,
device kind or device count differs stops at start, naming the difference. Each group trains
on one process's devices, as an independent JAX process: the sweep joins no `jax.distributed`
job (a row with `parallel.distributed=True` is refused). SIGTERM or Ctrl-C saves the groups in
flight; a failed group stops the others (saved, told why) and the sweep ends with its error.

`--stop_after_minutes=M` (a lent accelerator's window) prints, before anything starts, the plan:
the groups expected to finish within M minutes, chosen so that the most rows finish
(`sweep.plan.plan`), from the groups of each size already finished on this device (their JSONs
in the results directory, trained on as many devices a group: training per step times the steps
a group has left, plus its evaluation), and which slot trains which; a group of a size not yet
measured starts after them if time is left. A group whose prediction no longer fits when its turn
comes is passed over; those passed over are named at the end.
"""

import os

from absl import flags

from transformer_jax import cli
from transformer_jax.sweep import run, slots

_SWEEP = flags.DEFINE_string('sweep', None, 'A sweep file (see the module docstring).',
                             required=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'One workdir per row goes under it.',
                               required=True)
_ROWS = flags.DEFINE_list('rows', None, 'Only these rows (default: all, in order).')
_RESULTS = flags.DEFINE_string('results', None, 'Where each finished row\'s JSON goes '
                               '(default: WORKDIR/rows).')
_OVERRIDE = flags.DEFINE_multi_string('override', [], 'FIELD=VALUE: a config field set in '
                                      'every row (as train\'s --config.FIELD=VALUE).')
_TOGETHER = flags.DEFINE_integer('together', 1, 'Rows trained and evaluated as one program, at '
                                 'most (module docstring).')
_DEVICES_PER_GROUP = flags.DEFINE_integer('devices_per_group', None, 'Devices each group '
                                          'trains on, the groups side by side on the others '
                                          '(default: all; module docstring).')
_PROCESS_INDEX = flags.DEFINE_integer('process_index', 0, 'This process\'s share of a sweep '
                                      'started in --process_count processes (module '
                                      'docstring).')
_PROCESS_COUNT = flags.DEFINE_integer('process_count', 1, 'The processes that share the sweep, '
                                      'each started with its --process_index.')
_STOP_AFTER = flags.DEFINE_float('stop_after_minutes', None, 'Start only the groups expected '
                                 'to finish within this many minutes from the start (module '
                                 'docstring).')
_DRY_RUN = flags.DEFINE_bool('dry_run', False, 'Check every row and print its changes and '
                              'the plan; train nothing, write nothing.')
_CONCURRENT = flags.DEFINE_integer('concurrent', None, 'Removed: the sweep trains its groups '
                                   'in its own process, side by side with --devices_per_group; '
                                   '--together trains rows as one program.')


def main():
  if _CONCURRENT.present:
    raise ValueError('--concurrent was removed: the sweep trains and evaluates its groups in '
                     'its own process, side by side with --devices_per_group=d; --together=N '
                     'trains N rows as one program')
  run.run(os.path.abspath(_SWEEP.value), _WORKDIR.value, _ROWS.value, _RESULTS.value,
          _OVERRIDE.value, _TOGETHER.value, _STOP_AFTER.value, _DEVICES_PER_GROUP.value,
          slots.SweepProcess(_PROCESS_INDEX.value, _PROCESS_COUNT.value), _DRY_RUN.value)


if __name__ == '__main__':
  cli.run(main)
