"""The sweep runner: rows trained and evaluated, figures tabulated, finished rows skipped; the
miniature Table 3 sweep scales the paper's rows faithfully."""

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time

from conftest import SMALL, train_config
from test_provenance import checkout_commit
from flax import traverse_util
import jax
import pytest

from transformer_jax import sweep as sweep_lib
from transformer_jax.config import checks, loading
from transformer_jax.storage import provenance
from transformer_jax.training import checkpointing

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
table3 = loading.import_sibling(__file__, '../configs/table3')


def _sweep_file(tmp_path, rows: dict | None = None) -> str:
  """A sweep file of rows 'small' and 'wide' (d_ff 128), or of `rows` (row -> fields), on the
  session's corpus (its dev split, which each row's evaluation decodes whole, of 64
  sentences)."""
  rows = rows or {'small': {}, 'wide': {'model.d_ff': 128}}
  fields = {**SMALL, 'train.num_train_steps': 20,
            'train.log_every_steps': 10, 'train.eval_every_steps': 20, 'train.eval_bleu': False,
            'train.num_eval_steps': 1, 'train.checkpoint_every_steps': 20}
  path = tmp_path / 'sweep.py'
  path.write_text(f'''
from transformer_jax.config import checks, loading

base = loading.load_module({os.path.join(REPO, 'configs', 'base.py')!r})

ROWS = {rows!r}
PAPER = {{'small': (4.92, 25.8)}}


def get_config(row={next(iter(rows))!r}):
  config = base.get_config()
  config.update_from_flattened_dict({{**{fields!r}, **ROWS[row]}})
  return config
''')
  return str(path)


def _sweep(*args) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', 'transformer_jax.sweep', *args], cwd=REPO,
                        capture_output=True, text=True)


@pytest.mark.slow
def test_rows_run_side_by_side_and_together_are_tabulated_and_skipped_when_done(tmp_path):
  """One sweep: rows small and drop trained as one program (`--together=2`) beside row wide
  (`--concurrent=2`), each group on its own core (or half of them), an override in every row;
  each row evaluated in its own workdir and tabulated; a second run trains nothing."""
  sweep, workdir, results = (_sweep_file(tmp_path, GROUPABLE), tmp_path / 'run',
                             tmp_path / 'results')
  rows = '--rows=small,drop,wide'
  done = _sweep(f'--sweep={sweep}', f'--workdir={workdir}', f'--results={results}', rows,
                '--override=model.attention_dropout_rate=0.05', '--together=2',
                '--concurrent=2')
  assert done.returncode == 0, done.stderr[-3000:]
  assert sorted(os.listdir(results)) == ['drop.json', 'small.json', 'wide.json']
  figures = {}
  for row in ('small', 'drop', 'wide'):
    with open(results / f'{row}.json') as f:
      figures[row] = json.load(f)
  small, drop, wide = figures['small'], figures['drop'], figures['wide']
  # The groups, side by side, each in a slot of its own.
  assert all(figures[row]['concurrent']['rows'] == 2 for row in figures)
  assert small['concurrent']['cores'] == drop['concurrent']['cores']
  cores = [row['concurrent']['cores'] for row in (small, wide)]
  assert sorted(sum(cores, [])) == sorted(os.sched_getaffinity(0)) and all(cores)
  assert 'training in' in done.stdout and '{small,drop}' in done.stdout
  for row in ('small', 'drop'):
    assert figures[row]['together'] == {'rows': ['small', 'drop'], 'shuffle_seed': 0}
  assert wide['together'] == {'rows': ['wide'], 'shuffle_seed': None}  # its own order
  assert drop['model']['dropout_rate'] == 0.3 and small['model']['dropout_rate'] == 0.1
  assert small['train_seconds'] == drop['train_seconds']
  assert small['perplexity'] != drop['perplexity']
  # Every row's figures, with the override and where they came from.
  for result in figures.values():
    assert result['model']['attention_dropout_rate'] == 0.05
    assert result['overrides'] == ['model.attention_dropout_rate=0.05']
    assert result['checkpoint_steps'] == [20] and result['perplexity'] > 1
  assert wide['model']['d_ff'] == 128 and wide['steps'] == 20 and wide['beam_size'] == 4
  assert wide['split'] == 'validation' and 0 <= wide['bleu_tokenized'] <= 100
  assert wide['provenance']['machine']['device'] == jax.devices()[0].device_kind
  assert wide['provenance']['machine']['processor']
  assert wide['provenance']['commit'] == checkout_commit()
  with open(workdir / 'wide' / 'metrics.jsonl') as f:
    logged = [json.loads(line) for line in f]
  assert wide['dev_curve'] == [{'step': r['step'], 'perplexity': r['perplexity']}
                               for r in logged if r['split'] == 'validation']
  assert [point['step'] for point in wide['dev_curve']] == [20]
  with open(workdir / 'table3.csv') as f:
    table = list(csv.DictReader(f))
  assert [r['row'] for r in table] == ['small', 'wide', 'drop']  # the sweep's order
  assert table[0]['paper_bleu'] == '25.8' and table[1]['paper_bleu'] == ''
  assert float(table[1]['dev_ppl']) == round(wide['perplexity'], 2)
  assert '| small |' in (workdir / 'table3.md').read_text()
  assert (workdir / 'table3.png').stat().st_size > 0

  # A second run finds the rows done and trains nothing.
  mtime = os.path.getmtime(results / 'small.json')
  again = _sweep(f'--sweep={sweep}', f'--workdir={workdir}', f'--results={results}', rows)
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout.count('done already') == 3
  assert os.path.getmtime(results / 'small.json') == mtime


def test_a_row_whose_training_stopped_early_is_not_evaluated(tmp_path, monkeypatch):
  # What a preempted training run leaves: exit status 0, checkpoints short of the last step.
  workdir = tmp_path / 'row'

  def fake_run(command, log_path, timing_path=None, slot=None):
    assert '--train_together=row' in command, f'ran {command[2:4]} after an unfinished run'
    checkpointing.write_config(train_config(**{'train.num_train_steps': 20}), str(workdir))
    for step in ('10', '12', '20.orbax-checkpoint-tmp-1'):  # step 20 never finished writing
      os.makedirs(workdir / 'checkpoints' / step)
    return 1.0, ''

  monkeypatch.setattr(sweep_lib, '_run', fake_run)
  with pytest.raises(RuntimeError, match='row stopped at step 12 of 20'):
    sweep_lib.run_group('sweep.py', ['row'], str(tmp_path))


def test_a_row_trains_as_a_group_of_one_and_a_failed_group_names_its_rows(tmp_path, monkeypatch):
  # One route for a row and a group: the child that trains the group (`--train_together`).
  commands = []

  def failing(command, log_path, timing_path=None, slot=None):
    commands.append(command)
    raise RuntimeError(f'transformer_jax.sweep failed (exit 1); see {log_path}')

  monkeypatch.setattr(sweep_lib, '_run', failing)
  for rows in (['wide'], ['small', 'drop']):
    with pytest.raises(RuntimeError, match=f'training {", ".join(rows)}: .* see .*sweep.log'):
      sweep_lib.run_group('sweep.py', rows, str(tmp_path))
  assert [c[2:5] for c in commands] == [
      ['transformer_jax.sweep', '--sweep=sweep.py', f'--workdir={tmp_path}'],
      ['transformer_jax.sweep', '--sweep=sweep.py', f'--workdir={tmp_path}']]
  assert [c[5] for c in commands] == ['--train_together=wide', '--train_together=small,drop']


def test_training_time_is_saved_while_it_runs_and_adds_up_over_attempts(tmp_path, monkeypatch):
  # A runner killed part-way loses nothing but the last few seconds: the child reads the
  # timing file while it runs and finds an earlier attempt's 100 s plus its own time so far.
  monkeypatch.setattr(sweep_lib, 'SAVE_SECONDS_EVERY', 0.05)
  timing = tmp_path / 'seconds.json'
  timing.write_text('100.0')
  child = ('import json, sys, time; time.sleep(1.0); '
           f'print(json.load(open({str(timing)!r})))')
  seconds, output = sweep_lib._run([sys.executable, '-c', child], str(tmp_path / 'log'),
                                   str(timing))
  seen = float(output)
  assert 100.5 < seen < seconds
  assert json.loads(timing.read_text()) == seconds
  assert str(seen) in (tmp_path / 'log').read_text()  # stdout is kept in the log too


def test_a_sigterm_to_the_sweep_reaches_the_running_command(tmp_path):
  # The child exits 3 on SIGTERM, 0 if it never gets one; the sweep process itself survives.
  # A handler of the test's own catches the signal should it not be passed on.
  ready = tmp_path / 'ready'
  child = ('import pathlib, signal, sys, time; '
           'signal.signal(signal.SIGTERM, lambda *_: sys.exit(3)); '
           f'pathlib.Path({str(ready)!r}).touch(); time.sleep(20)')
  caught = []

  def record(*_):
    caught.append(True)

  previous = signal.signal(signal.SIGTERM, record)

  def terminate_when_ready():
    while not ready.exists():
      time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)

  threading.Thread(target=terminate_when_ready, daemon=True).start()
  try:
    with pytest.raises(RuntimeError, match=r'failed \(exit 3\)'):
      sweep_lib._run([sys.executable, '-c', child], str(tmp_path / 'log'))
    assert not caught
    assert signal.getsignal(signal.SIGTERM) is record  # the sweep's handler is gone again
  finally:
    signal.signal(signal.SIGTERM, previous)


def test_slots_split_the_cores_or_the_accelerators_memory(monkeypatch):
  monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3, 5})
  assert [slot.cores for slot in sweep_lib.slots(2, 'cpu')] == [(0, 1), (2, 3, 5)]
  assert sweep_lib.slots(1, 'cpu') == [sweep_lib.Slot()]  # alone: every core, as without
  with pytest.raises(ValueError, match='--concurrent=6: more rows at once than the 5 CPU cores'):
    sweep_lib.slots(6, 'cpu')
  gpu = sweep_lib.slots(4, 'gpu')
  assert len(gpu) == 4 and all(slot.cores is None for slot in gpu)
  assert all(dict(slot.env) == {'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.225'} for slot in gpu)


def test_a_command_runs_on_its_slots_cores_and_environment(tmp_path):
  slot = sweep_lib.Slot(cores=(0,), env=(('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.450'),))
  child = ('import os; print(sorted(os.sched_getaffinity(0)), '
           'os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"])')
  _, output = sweep_lib._run([sys.executable, '-c', child], str(tmp_path / 'log'), slot=slot)
  assert output.split() == ['[0]', '0.450']


def _fake_rows(tmp_path, monkeypatch, fail: str | None = None) -> list:
  """sweep.run with run_group replaced by rows that take 0.3 s each (or fail, for `fail`);
  returns the (row, start, end, slot) of each row that ran."""
  ran, lock = [], threading.Lock()
  monkeypatch.setattr(provenance, 'platform', lambda: ('cpu', 'cpu'))
  monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1})
  monkeypatch.setattr(sweep_lib, 'write_table', lambda *args: None)

  def fake_group(sweep_path, group, root, overrides, slot, concurrent, device_kind):
    finished = []
    for row in group:
      start = time.perf_counter()
      time.sleep(0.3)
      with lock:
        ran.append((row, start, time.perf_counter(), slot))
      if row == fail:
        raise RuntimeError(f'{row} failed')
      finished.append({'row': row, 'perplexity': 5.0, 'bleu_tokenized': 30.0,
                       'train_seconds': 0.3, 'steps': 20, 'eval_seconds': 0.0,
                       'together': {'rows': group},
                       'provenance': {'machine': {'device': device_kind}}})
    return finished

  monkeypatch.setattr(sweep_lib, 'run_group', fake_group)
  return ran


def _overlapping(ran) -> bool:
  return any(a[1] < b[2] and b[1] < a[2] for a in ran for b in ran if a is not b)


@pytest.mark.parametrize('concurrent', [1, 2])
def test_rows_run_side_by_side_each_in_its_own_slot(tmp_path, monkeypatch, concurrent):
  ran = _fake_rows(tmp_path, monkeypatch)
  results = sweep_lib.run(_sweep_file(tmp_path), str(tmp_path / 'run'), ['small', 'wide'],
                          str(tmp_path / 'results'), concurrent=concurrent)
  assert sorted(results) == ['small', 'wide']
  assert sorted(os.listdir(tmp_path / 'results')) == ['small.json', 'wide.json']
  assert _overlapping(ran) == (concurrent == 2)
  if concurrent == 2:
    assert sorted(slot.cores for *_, slot in ran) == [(0,), (1,)]


def test_after_a_failed_row_no_new_row_starts(tmp_path, monkeypatch):
  ran = _fake_rows(tmp_path, monkeypatch, fail='small')
  with pytest.raises(RuntimeError, match='small failed'):
    sweep_lib.run(_sweep_file(tmp_path), str(tmp_path / 'run'), ['small', 'wide'],
                  str(tmp_path / 'results'), concurrent=1)
  assert [row for row, *_ in ran] == ['small']
  assert not os.path.exists(tmp_path / 'results' / 'small.json')


def _finished(group: list[str], train_seconds: float, steps: int, eval_seconds: float,
              device: str = 'cpu') -> dict:
  """The JSONs of a group's rows as the sweep writes them, with what the prediction reads."""
  return {row: {'row': row, 'train_seconds': train_seconds, 'steps': steps,
                'eval_seconds': eval_seconds, 'together': {'rows': group},
                'provenance': {'machine': {'device': device}}} for row in group}


def test_a_groups_time_is_predicted_from_the_slowest_finished_group_of_its_size():
  results = {**_finished(['a', 'b'], 100.0, 1000, 10.0), **_finished(['c', 'd'], 150.0, 1000, 5.0),
             **_finished(['e', 'f'], 900.0, 1000, 5.0, device='H200'),
             **_finished(['g'], 50.0, 1000, 3.0)}
  # (c, d): 0.15 s a step for 2000 steps, and two evaluations of 5 s; (a, b) gives 220 s.
  assert sweep_lib.predicted_seconds(results, 2, 2000, 'cpu') == pytest.approx(310.0)
  assert sweep_lib.predicted_seconds(results, 2, 2000, 'H200') == pytest.approx(1810.0)
  assert sweep_lib.predicted_seconds(results, 1, 500, 'cpu') == pytest.approx(28.0)
  assert sweep_lib.predicted_seconds(results, 3, 2000, 'cpu') is None  # no group of 3 yet
  assert sweep_lib.predicted_seconds({}, 2, 2000, 'cpu') is None


def test_a_group_predicted_to_end_after_the_deadline_is_not_started(tmp_path, monkeypatch, capsys):
  """With --stop_after_minutes, a group that the finished groups of its size on this device say
  would end too late is passed over (named), a smaller one after it still starts, and a group of
  a size never measured starts; the steps a cut-off group has already trained are not counted
  again."""
  ran = _fake_rows(tmp_path, monkeypatch)
  results = tmp_path / 'results'
  results.mkdir()
  rows = {'x': {}, 'x_seed1': {'seed': 1}, 'y': {'model.d_ff': 96}, 'pair': {},
          'pair_seed1': {'seed': 1}, 'wide': {'model.d_ff': 128},
          **{f'triple_seed{i}': {'seed': i} for i in (2, 3, 4)}}
  sweep = _sweep_file(tmp_path, rows)
  # Groups finished earlier on this device: two rows of 20 steps in 130 s; one row in 10 s.
  for name, result in {**_finished(['x', 'x_seed1'], 120.0, 20, 5.0),
                       **_finished(['y'], 8.0, 20, 2.0)}.items():
    (results / f'{name}.json').write_text(json.dumps(result))
  sweep_lib.run(sweep, str(tmp_path / 'run'), ['pair', 'pair_seed1', 'wide'], str(results),
                together=2, stop_after_minutes=1.0)
  assert [row for row, *_ in ran] == ['wide']  # 130 s > 60 s left; 10 s fit
  out = capsys.readouterr().out
  assert ('pair, pair_seed1: not started: a group of 2 rows with 20 steps to train takes '
          '130 s') in out
  assert 'not started before --stop_after_minutes=1: pair, pair_seed1' in out
  # Cut off at step 15 in an earlier call: 5 steps left, 40 s predicted, so it starts.
  monkeypatch.setattr(checkpointing, 'saved_steps', lambda workdir: [15] if 'pair' in workdir
                      else [])
  sweep_lib.run(sweep, str(tmp_path / 'run'), ['pair', 'pair_seed1', 'wide'], str(results),
                together=2, stop_after_minutes=1.0)
  assert [row for row, *_ in ran] == ['wide', 'pair', 'pair_seed1']
  # A size not measured on this device (no group of 3 has finished) starts.
  triple = [f'triple_seed{i}' for i in (2, 3, 4)]
  sweep_lib.run(sweep, str(tmp_path / 'run'), triple, str(results), together=3,
                stop_after_minutes=0.01)
  assert [row for row, *_ in ran][3:] == triple


def test_each_rows_config_is_checked_once_where_it_enters_the_sweep(tmp_path, monkeypatch):
  """The sweep's process checks each row's config (with the overrides) once, before anything
  trains: not again to group the rows, predict a group's time or start its training. (The
  training command then checks its own --config once: test_train.)"""
  _fake_rows(tmp_path, monkeypatch)
  checked, check = [], checks.validate

  def counted(config):
    checked.append((config.seed, config.model.d_ff, config.model.dropout_rate,
                    config.train.label_smoothing, config.model.attention_dropout_rate))
    check(config)

  monkeypatch.setattr(checks, 'validate', counted)
  sweep_lib.run(_sweep_file(tmp_path, GROUPABLE), str(tmp_path / 'run'), list(GROUPABLE),
                str(tmp_path / 'results'), ['model.attention_dropout_rate=0.05'], together=2,
                stop_after_minutes=60)
  assert len(checked) == len(GROUPABLE) == len(set(checked))
  assert {row[-1] for row in checked} == {0.05}


def test_a_failed_command_names_its_log(tmp_path):
  with pytest.raises(RuntimeError, match='see .*log'):
    sweep_lib._run([sys.executable, '-c', 'raise SystemExit(3)'], str(tmp_path / 'log'))


@pytest.mark.slow
def test_unknown_rows_are_an_error_before_training(tmp_path):
  result = _sweep(f'--sweep={_sweep_file(tmp_path)}', f'--workdir={tmp_path / "run"}',
                  '--rows=small,F9')
  assert result.returncode != 0
  assert 'F9 not in' in result.stderr
  assert not (tmp_path / 'run').exists()


def test_overrides_are_parsed_as_train_parses_them(tmp_path):
  sweep = loading.load_sweep(_sweep_file(tmp_path))
  config = sweep_lib.row_config(sweep, 'wide',
                                ['model.dropout_rate=0.25', 'train.grad_accum_steps=2'])
  assert config.model.dropout_rate == 0.25 and config.train.grad_accum_steps == 2
  assert config.model.d_ff == 128  # the row's own change stays
  with pytest.raises(ValueError, match='must be a positive integer'):
    sweep_lib.row_config(sweep, 'wide', ['train.grad_accum_steps=0'])


@pytest.mark.slow
@pytest.mark.parametrize('override, error', [
    ('model.nope=1', 'config.model.nope does not exist'),
    ('model.num_layers=two', "invalid literal for int"),
])
def test_bad_overrides_are_an_error_before_training(tmp_path, override, error):
  result = _sweep(f'--sweep={_sweep_file(tmp_path)}', f'--workdir={tmp_path / "run"}',
                  f'--override={override}')
  assert result.returncode != 0
  assert error in result.stderr
  assert not (tmp_path / 'run').exists()


def _flat(config) -> dict:
  return traverse_util.flatten_dict(config.to_dict(), sep='.')


def _changes(config, base) -> dict:
  flat, base = _flat(config), _flat(base)
  return {field: value for field, value in flat.items() if value != base[field]}


def test_miniature_table3_rows_change_what_the_papers_rows_change():
  """Each row of experiments/table3_multi30k/sweep.py changes the same fields as the paper's row
  (configs/table3.py), widths by the paper's factor, dropout and smoothing to the paper's
  values, N in the paper's direction, steps by the paper's factor (big trains 3 times as long);
only big's checkpoint spacing, which Table 3's evaluation does not use, is not copied."""
  mini = loading.load_sweep(os.path.join(REPO, 'experiments', 'table3_multi30k', 'sweep.py'))
  assert list(mini.ROWS)[:len(table3.ROWS)] == list(table3.ROWS)
  assert mini.PAPER == table3.PAPER
  paper_base, mini_base = _flat(table3.get_config('base')), _flat(mini.get_config('base'))
  for row in table3.ROWS:
    paper = _changes(table3.get_config(row), table3.get_config('base'))
    ours = _changes(mini.get_config(row), mini.get_config('base'))
    checks.validate(mini.get_config(row))
    paper.pop('train.checkpoint_every_steps', None)  # big's 10-minute checkpoints, likewise
    assert set(ours) == set(paper), row
    for field, value in ours.items():
      if field in ('model.num_heads', 'model.d_k', 'model.d_v', 'model.d_model', 'model.d_ff',
                   'train.num_train_steps'):
        assert value / mini_base[field] == paper[field] / paper_base[field], (row, field)
      elif field == 'model.num_layers':
        assert (value > mini_base[field]) == (paper[field] > paper_base[field]), row
      else:
        assert value == paper[field], (row, field)
  # Every row again with seed 1 (base with seed 2 too), changing the seed and nothing else.
  replicates = set(mini.ROWS) - set(table3.ROWS)
  assert replicates == {f'{row}_seed1' for row in table3.ROWS} | {'base_seed2'}
  for row in replicates:
    paper_row, seed = row.split('_seed')
    changes = _changes(mini.get_config(row), mini.get_config(paper_row))
    assert changes == {'seed': int(seed)}, row


def test_regularised_table3_rows_change_what_the_miniatures_rows_change():
  """experiments/table3_regularised/sweep.py: each row changes the fields that
  table3_multi30k.py's row changes, around a base at P_drop 0.3; P_drop by the paper's increase
  over its base (D1: to 0, D2: +0.1, big: +0.2); every other value as the miniature's row, steps
  by its factor. Every training batch has one packed shape, and the
  steps a call divide every interval the loop acts on."""
  mini = loading.load_sweep(os.path.join(REPO, 'experiments', 'table3_multi30k', 'sweep.py'))
  ours = loading.load_sweep(
      os.path.join(REPO, 'experiments', 'table3_regularised', 'sweep.py'))
  assert list(ours.ROWS) == list(mini.ROWS)
  base = ours.get_config('base')
  assert base.model.dropout_rate == 0.3
  paper_rate = lambda row: table3.get_config(row.split('_seed')[0]).model.dropout_rate
  for row in ours.ROWS:
    config = ours.get_config(row)
    checks.validate(config)
    changes = _changes(config, base)
    expected = _changes(mini.get_config(row), mini.get_config('base'))
    assert set(changes) == set(expected), row
    for field, value in changes.items():
      if field == 'model.dropout_rate' and paper_rate(row) == 0:
        assert value == 0, row
      elif field == 'model.dropout_rate':
        assert value - 0.3 == pytest.approx(paper_rate(row) - 0.1), row
      elif field == 'train.num_train_steps':
        assert (value / base.train.num_train_steps
                == expected[field] / mini.get_config('base').train.num_train_steps), row
      else:
        assert value == expected[field], (row, field)
    train = config.train
    assert config.data.pack_length == config.data.max_length, row
    for interval in (train.log_every_steps, train.eval_every_steps,
                     train.checkpoint_every_steps, train.num_train_steps):
      assert interval % train.steps_per_call == 0, (row, interval)


GROUPABLE = {'small': {}, 'wide': {'model.d_ff': 128}, 'drop': {'model.dropout_rate': 0.3},
             'seed2': {'seed': 2}, 'smooth': {'train.label_smoothing': 0.0}}


@pytest.mark.parametrize('together, want', [
    (1, [['small'], ['wide'], ['drop'], ['seed2'], ['smooth']]),
    (2, [['small', 'drop'], ['wide'], ['seed2', 'smooth']]),
    (4, [['small', 'drop', 'seed2', 'smooth'], ['wide']])])
def test_rows_are_grouped_in_order_where_they_can_train_as_one_program(tmp_path, together, want):
  sweep = loading.load_sweep(_sweep_file(tmp_path, GROUPABLE))
  configs = {row: sweep_lib.row_config(sweep, row, []) for row in GROUPABLE}
  assert sweep_lib.groups(configs, together) == want
