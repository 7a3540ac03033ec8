"""Runs a sweep file's rows not finished yet in this process: checked, planned (`plan`) and
trained in this process's share of the slots (`slots`); each row's figures to a JSON file.

Each group trains as one program and is evaluated as Table 3 was (`group`); the figures go to
`<results>/<row>.json`, and the table beside the paper's (`results`).

The data and vocabulary are loaded once for every group of one data config and seed
(`loop.runs_together.data_key`). A row whose JSON exists is skipped, so a sweep that crashed, was
killed (at any moment) or was stopped resumes where it was: each group in flight from its last
checkpoint, a group killed while its rows' files were written from its results file
(`group.recover`).
"""

import json
import os
import time
from typing import Any

from etils import epath
import jax

from transformer_jax.config import fields, loading
from transformer_jax.model import sharding
from transformer_jax.storage import buckets, workdirs
from transformer_jax.sweep import claims, group as group_lib, plan, results as tables
from transformer_jax.sweep import slots as slots_lib


def run(sweep_path: str, workdir: str, rows: list[str] | None = None,
        results_dir: str | None = None, overrides: list[str] = (), together: int = 1,
        stop_after_minutes: float | None = None, devices_per_group: int | None = None,
        process: slots_lib.SweepProcess = slots_lib.SweepProcess(),
        dry_run: bool = False) -> dict:
  """Runs the rows not finished yet (all of the sweep's, or `rows`) in groups of up to
  `together` rows, with `overrides` (`FIELD=VALUE`) in every row, each group on
  `devices_per_group` of this process's devices (default: all), groups side by side on the
  others; with `stop_after_minutes`, only the groups the plan expects to finish by then
  (`plan.plan`, printed before anything starts), each started only if its prediction still
  fits when it comes; with `process`, only this process's groups of the plan over every
  process's slots; with `dry_run`, only checked and planned: the rows' changes and the plan
  printed, nothing written. Returns every finished row's figures."""
  started = time.monotonic()
  if not 0 <= process.index < process.count:
    raise ValueError(f'--process_index={process.index} must be in [0, --process_count='
                     f'{process.count})')
  sweep = loading.load_sweep(sweep_path)
  rows = list(sweep.ROWS) if rows is None else list(rows)
  unknown = [row for row in rows if row not in sweep.ROWS]
  if unknown:
    raise ValueError(f'--rows: {", ".join(unknown)} not in {sweep_path} '
                     f'(rows: {", ".join(sweep.ROWS)})')
  if together < 1:
    raise ValueError(f'--together must be at least 1, got {together}')
  if jax.process_count() > 1:
    raise RuntimeError(f'this process is one of {jax.process_count()} of a JAX job; a sweep '
                       'trains each group in one process, which orbax cannot checkpoint from '
                       'any process but the first of a job: start each as a JAX process of its '
                       'own and share the sweep with --process_index and --process_count')
  slots = slots_lib.device_slots(jax.local_devices(), devices_per_group)
  # Every row's config is checked before anything trains, its mesh on a slot's devices too.
  configs = {row: plan.row_config(sweep, row, overrides) for row in rows}
  for row, config in configs.items():
    if config.parallel.distributed:
      raise ValueError(f'row {row}: parallel.distributed=True, but a sweep trains each group on '
                       'one process\'s devices and joins no jax.distributed job (orbax writes '
                       'the checkpoints of one process\'s devices from process 0 of a job '
                       'only); to share the groups among processes, start the sweep in each '
                       'with --process_index=i --process_count=N')
    try:
      sharding.mesh_shape(config, len(slots[0]))
    except ValueError as e:
      raise ValueError(f'row {row}, on {len(slots[0])} devices a group: {e}') from None
  results_dir = results_dir or os.path.join(workdir, 'rows')
  if dry_run:
    return _dry_run(sweep_path, sweep, configs, together, workdir, results_dir, overrides,
                    slots, started, stop_after_minutes, process)
  buckets.check(workdir, '--workdir')  # both, before either is created
  buckets.check(results_dir, '--results')
  workdirs.check_writable(workdir, '--workdir')
  workdirs.check_writable(results_dir, '--results')
  group_lib.recover_all(sweep.ROWS, workdir, results_dir)
  results = _read_results(sweep.ROWS, results_dir)
  for row in results:
    if row in configs:
      print(_done(row, results_dir), flush=True)
  groups = _groups(sweep_path, rows, together, overrides, configs, results, workdir, slots,
                   process)
  if groups:
    side_by_side = slots_lib.SideBySide(sweep_path, sweep, configs, workdir, results_dir,
                                        overrides, results, slots, started, stop_after_minutes,
                                        process)
    side_by_side.train(groups)
    if side_by_side.passed_over:
      print(f'not started before --stop_after_minutes={stop_after_minutes:g}: '
            + '; '.join(', '.join(group) for group in side_by_side.passed_over), flush=True)
  if process.count == 1:
    results = _read_results(sweep.ROWS, results_dir)
    tables.write_table(sweep_path, sweep, results, workdir)
    return results
  return _table_once(sweep_path, sweep, rows, workdir, results_dir, process)


def _done(row: str, results_dir: str) -> str:
  return f'{row}: done already ({os.path.join(results_dir, row + ".json")})'


def _dry_run(sweep_path: str, sweep: Any, configs: dict, together: int, workdir: str,
             results_dir: str, overrides: list[str], slots: list, started: float,
             stop_after_minutes: float | None, process: slots_lib.SweepProcess) -> dict:
  """Prints each row's fields that differ from the first row's and the plan of the rows not
  finished (this process's own grouping); returns the finished rows' figures."""
  results = _read_results(sweep.ROWS, results_dir)
  first = fields.flatten(next(iter(configs.values())))
  for row, config in configs.items():
    changes = {field: value for field, value in fields.flatten(config).items()
               if value != first.get(field)}
    print(_done(row, results_dir) if row in results else
          f'{row}: ' + (', '.join(f'{field}={value}' for field, value in changes.items())
                        or 'as the first row'), flush=True)
  to_run = {row: config for row, config in configs.items() if row not in results}
  side_by_side = slots_lib.SideBySide(sweep_path, sweep, configs, workdir, results_dir, overrides,
                                      results, slots, started, stop_after_minutes, process)
  side_by_side.plan_groups(plan.groups(to_run, together))
  return results


def _groups(sweep_path: str, rows: list[str], together: int, overrides: list[str],
            configs: dict, results: dict, workdir: str, slots: list,
            process: slots_lib.SweepProcess) -> list[list[str]]:
  """The groups of the rows not finished: this process's own grouping; or, in a shared sweep
  (or a workdir one used and has not finished), the groups recorded at its first start, which
  every process trains (`claims.record`: a process that differs from it is refused)."""
  to_run = [row for row in rows if row not in results]
  groups = plan.groups({row: configs[row] for row in to_run}, together)
  recorded = epath.Path(workdir, claims.RECORD_FILENAME).exists()
  if process.count > 1 or recorded:
    workdirs.warn_if_flock_is_local(workdir)
    mine = claims.sweep_record(sweep_path, rows, together, list(overrides), len(slots[0]),
                               groups, process.count, slots[0][0].device_kind,
                               sum(map(len, slots)))
    groups = claims.record(workdir, mine, set(results))['groups']
  return [group for group in groups if any(row not in results for row in group)]


def _table_once(sweep_path: str, sweep: Any, rows: list[str], workdir: str, results_dir: str,
                process: slots_lib.SweepProcess) -> dict:
  """Every finished row's figures; the table written if `rows` are all in and it has not been
  since the last of them came (by the process that ends last, under a lock: once)."""
  with claims.locked(os.path.join(workdir, 'table.lock')):
    results = _read_results(sweep.ROWS, results_dir)
    missing = [row for row in rows if row not in results]
    table = os.path.join(workdir, tables.table_name(sweep_path) + '.png')  # written last
    if missing:
      print(f'process {process.index}: done; {", ".join(missing)} not finished', flush=True)
    elif not epath.Path(table).exists() or epath.Path(table).stat().mtime < max(
        epath.Path(results_dir, f'{row}.json').stat().mtime for row in rows):
      tables.write_table(sweep_path, sweep, results, workdir)
  return results


def _read_results(rows: list[str], results_dir: str) -> dict:
  """The finished rows' figures, from their files in `results_dir`."""
  results = {}
  for row in rows:
    path = os.path.join(results_dir, f'{row}.json')
    if epath.Path(path).exists():
      results[row] = json.loads(epath.Path(path).read_text())
  return results
