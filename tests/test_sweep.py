"""The sweep: rows trained and evaluated in one process, a group as one program, figures
tabulated, finished rows skipped, groups planned for a deadline; the miniature Table 3 sweep
scales the paper's rows faithfully."""

import csv
import dataclasses
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

from conftest import SMALL, train_config, xla_flags
from test_provenance import checkout_commit
from flax import traverse_util
from etils import epath
import jax
import pytest

from transformer_jax.config import checks, loading
from transformer_jax.data import pipeline
from transformer_jax.decoding import translator as translator_lib
from transformer_jax.sweep import ahead as sweep_ahead, group as sweep_group, plan
from transformer_jax.sweep import results as tables, run as sweep_run
from transformer_jax.training import checkpointing, metrics_log, saved_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
table3 = loading.import_sibling(__file__, '../configs/table3')


def _sweep_file(tmp_path, rows: dict | None = None) -> str:
  """A sweep file, `table3_tiny/sweep.py`, of rows 'small' and 'wide' (d_ff 128), or of `rows`
  (row -> fields), on the session's corpus (its dev split, which each row's evaluation decodes
  whole, of 64 sentences), its training batches packed into one shape as the regularised
  Table 3 sweep's are (one training program a group)."""
  rows = rows or {'small': {}, 'wide': {'model.d_ff': 128}}
  fields = {**SMALL, 'data.pack_length': SMALL['data.max_length'], 'train.num_train_steps': 20,
            'train.log_every_steps': 10, 'train.eval_every_steps': 20, 'train.eval_bleu': False,
            'train.num_eval_steps': 1, 'train.checkpoint_every_steps': 10}
  path = tmp_path / 'table3_tiny' / 'sweep.py'
  path.parent.mkdir(exist_ok=True)
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


@dataclasses.dataclass
class Swept:
  """A sweep run in this process, and what the spies saw."""
  sweep: str
  workdir: pathlib.Path
  results: pathlib.Path
  started: list
  loads: list
  group_translators: list


# The rows and flags of the sweep of `swept`.
SWEPT_ROWS, SWEPT_OVERRIDES = ['small', 'drop', 'wide'], ['model.attention_dropout_rate=0.05']


@pytest.fixture(scope='module')
def swept(tmp_path_factory) -> Swept:
  """Rows small and drop trained and evaluated as one program (`--together=2`), then row wide
  alone, with an override in every row, in this process; every process started, every data
  load and every group translator recorded."""
  tmp_path = tmp_path_factory.mktemp('swept')
  done = Swept(_sweep_file(tmp_path, GROUPABLE), tmp_path / 'run', tmp_path / 'results', [],
               [], [])
  popen, load, rows_translator = subprocess.Popen, pipeline.load, translator_lib.GroupTranslator

  def spied_popen(args, *rest, **kwargs):
    done.started.append(args)
    return popen(args, *rest, **kwargs)

  def spied_load(*args, **kwargs):
    done.loads.append(args[1])
    return load(*args, **kwargs)

  def spied_rows_translator(workdirs, **settings):
    done.group_translators.append((list(workdirs), settings))
    return rows_translator(workdirs, **settings)

  with pytest.MonkeyPatch.context() as monkeypatch:
    monkeypatch.setattr(subprocess, 'Popen', spied_popen)
    monkeypatch.setattr(pipeline, 'load', spied_load)
    monkeypatch.setattr(sweep_group, 'GroupTranslator', spied_rows_translator)
    sweep_run.run(done.sweep, str(done.workdir), SWEPT_ROWS, str(done.results), SWEPT_OVERRIDES,
                  together=2)
  return done


@pytest.mark.slow
def test_groups_train_and_evaluate_in_the_sweeps_process(swept):
  """`swept`: no process started for a group or a row's evaluation, the data and vocabulary
  loaded once (the three rows share the data config and seed); each group's programs compiled
  ahead (`sweep.ahead`: the first's before it trained, wide's while the group trained) and none
  of them compiled or loaded again when the group trains and is evaluated; each row evaluated
  in its own workdir as Table 3 was, and tabulated under the sweep file's name."""
  workdir, results = swept.workdir, swept.results
  # No Python process: only tools (git for the provenance's commit, matplotlib's fc-list).
  assert not [args for args in swept.started
              if os.path.basename(str(args[0])).startswith('python') or args[0] == sys.executable]
  assert swept.loads == [str(workdir / 'small')]
  # The group's translator evaluates with the model its programs were compiled for.
  ((translator_dirs, settings),) = swept.group_translators
  assert translator_dirs == [str(workdir / 'small'), str(workdir / 'drop')]
  assert {k: v for k, v in settings.items() if k != 'model'} == sweep_group.TABLE3_DECODING
  assert settings['model'] is not None
  assert sorted(os.listdir(results)) == ['drop.json', 'small.json', 'wide.json']
  figures = {}
  for row in ('small', 'drop', 'wide'):
    with open(results / f'{row}.json') as f:
      figures[row] = json.load(f)
  small, drop, wide = figures['small'], figures['drop'], figures['wide']
  for row in ('small', 'drop'):
    assert figures[row]['together'] == {'rows': ['small', 'drop'], 'shuffle_seed': 0}
  assert wide['together'] == {'rows': ['wide'], 'shuffle_seed': None}  # its own order
  assert all(figures[row]['evaluated_together'] for row in figures)
  assert small['eval_seconds'] == drop['eval_seconds']  # the group's evaluation
  assert drop['model']['dropout_rate'] == 0.3 and small['model']['dropout_rate'] == 0.1
  assert small['train_seconds'] == drop['train_seconds']
  assert small['perplexity'] != drop['perplexity']
  # Each workdir has the vocabulary it was trained and evaluated with.
  vocabulary = (workdir / 'small' / 'spm.model').read_bytes()
  assert all((workdir / row / 'spm.model').read_bytes() == vocabulary for row in ('drop', 'wide'))
  # Every row's figures, with the override and where they came from.
  for result in figures.values():
    assert result['model']['attention_dropout_rate'] == 0.05
    assert result['overrides'] == ['model.attention_dropout_rate=0.05']
    assert result['checkpoint_steps'] == [20] and result['perplexity'] > 1
    assert (result['beam_size'], result['alpha'], result['split']) == (4, 0.6, 'validation')
  assert wide['model']['d_ff'] == 128 and wide['steps'] == 20
  # Compiled ahead: the initial state, a step for each batch shape, the dev loss, the decoder
  # for a bucket at least, Table 3's loss; then neither group's training (its startup and
  # steps) nor its evaluation compiled (or loaded from the cache) a program.
  for row in ('small', 'wide'):
    assert figures[row]['compiled_ahead']['used']
    assert figures[row]['compiled_ahead']['compiled'] >= 5
    with open(workdir / row / 'metrics.jsonl') as f:
      compiles = [r for r in map(json.loads, f) if r['split'] == 'compile']
    assert [(r['what'], r['compiled'] + r['loaded']) for r in compiles[:-1]] == [('startup', 0)]
    assert figures[row]['programs_compiled'] == figures[row]['programs_loaded'] == 0
  assert 0 <= wide['bleu_tokenized'] <= 100
  assert wide['provenance']['machine']['device'] == jax.devices()[0].device_kind
  assert wide['provenance']['machine']['processor']
  assert wide['provenance']['commit'] == checkout_commit()
  with open(workdir / 'wide' / 'metrics.jsonl') as f:
    logged = [json.loads(line) for line in f]
  assert wide['dev_curve'] == [{'step': r['step'], 'perplexity': r['perplexity']}
                               for r in logged if r['split'] == 'validation']
  assert [point['step'] for point in wide['dev_curve']] == [20]
  assert 'data loaded' in (workdir / 'small' / 'sweep.log').read_text()  # what the group printed
  with open(workdir / 'table3_tiny.csv') as f:
    table = list(csv.DictReader(f))
  assert [r['row'] for r in table] == ['small', 'wide', 'drop']  # the sweep's order
  assert table[0]['paper_bleu'] == '25.8' and table[1]['paper_bleu'] == ''
  assert float(table[1]['dev_ppl']) == round(wide['perplexity'], 2)
  assert '| small |' in (workdir / 'table3_tiny.md').read_text()
  assert (workdir / 'table3_tiny.png').stat().st_size > 0



# What a row's metrics.jsonl records that depends on the time taken, not on the training.
_TIMINGS = ('seconds', 'compile_seconds', 'step_time', 'target_tokens_per_second')


def _logged(workdir) -> dict:
  """(split, step) -> the last 'train' or 'validation' record of that step, timings left out
  (a resumed run logs again the steps after its checkpoint)."""
  return {(r['split'], r['step']): {k: v for k, v in r.items()
                                    if k not in (*_TIMINGS, 'split', 'step')}
          for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] in ('train', 'validation')}


# What the killed sweep prints as it goes (stdout and stderr), in order: the moments a random
# kill follows (`_killed`).
_PHASES = ('its training compiled ahead', 'step 0: data loaded', 'step 0: startup',
           'step 20 validation', 'the whole run')


def signalled(command: list[str], after: tuple[str, ...], then: int,
              delay: float = 0.0) -> tuple[str, int]:
  """Runs `command` on 8 devices and sends it signal `then` `delay` seconds after it first prints
  a line holding one of `after`; returns what it printed, and its exit status. The command takes
  Ctrl-C as from a terminal even where the tests run as a background job, which ignores it (an
  ignored signal stays ignored in a child; a handled one is reset to its default)."""
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own
  try:
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, 'XLA_FLAGS': xla_flags(8)})
  finally:
    signal.signal(signal.SIGINT, previous)
  printed = []
  for line in process.stdout:
    printed.append(line)
    if any(marker in line for marker in after):
      time.sleep(delay)
      process.send_signal(then)
      break
  printed.append(process.communicate()[0])
  return ''.join(printed), process.returncode


def _killed(command: list[str], after: tuple[str, ...], delay: float) -> str:
  """`signalled` with SIGKILL; fails if the command ended before the kill."""
  printed, status = signalled(command, after, signal.SIGKILL, delay)
  assert status == -signal.SIGKILL, printed[-3000:]  # the kill landed
  return printed


@pytest.mark.slow
def test_a_sweep_killed_at_any_moment_resumes_to_the_uninterrupted_figures(swept, tmp_path,
                                                                        capsys):
  """The sweep of `swept`'s group (small and drop), in a process killed (SIGKILL) three times,
  each time run again in the same workdir: at a random moment (a random one of its phases, then
  a random delay under 0.2 s), once its programs are compiled (its evaluation's compiling in the
  background), and once its training has ended (its evaluation under way); then run again here:
  every value each row logged and its figures equal `swept`'s; killed between two rows' files,
  the sweep writes the missing one from the group's results and trains nothing. The random
  moment's seed is printed; TRANSFORMER_JAX_KILL_SEED=seed replays it."""
  seed = int(os.environ.get('TRANSFORMER_JAX_KILL_SEED', random.randrange(2**32)))
  draw = random.Random(seed)
  phase, delay = draw.choice(_PHASES), draw.uniform(0.0, 0.2)
  where = f'killed {delay:.2f} s after {phase!r} (TRANSFORMER_JAX_KILL_SEED={seed})'
  print(where)
  workdir, results = tmp_path / 'run', tmp_path / 'results'
  group = ['small', 'drop']
  # On the 8 devices of `swept` and of the run resumed here, so that reductions add up alike.
  command = [sys.executable, '-m', 'transformer_jax.sweep', f'--sweep={swept.sweep}',
             f'--workdir={workdir}', f'--results={results}', f'--rows={",".join(group)}',
             '--together=2', *(f'--override={o}' for o in SWEPT_OVERRIDES)]
  _killed(command, (phase,), delay)
  _killed(command, ('its training compiled ahead',), 0.0)
  printed = _killed(command, ('the whole run', 'nothing to do'), 0.0)
  assert 'done already' not in printed, where
  sweep_run.run(swept.sweep, str(workdir), group, str(results), SWEPT_OVERRIDES, together=2)
  for row in group:
    logged, expected = _logged(workdir / row), _logged(swept.workdir / row)
    assert sorted(logged) == sorted(expected), where
    for key, values in logged.items():
      assert values == pytest.approx(expected[key], rel=1e-6), (row, key, where)
    with open(results / f'{row}.json') as f, open(swept.results / f'{row}.json') as g:
      resumed, uninterrupted = json.load(f), json.load(g)
    for key in ('perplexity', 'bleu_tokenized', 'bleu_detokenized'):
      assert resumed[key] == pytest.approx(uninterrupted[key], rel=1e-6), (row, key, where)
    assert [p['step'] for p in resumed['dev_curve']] == [
        p['step'] for p in uninterrupted['dev_curve']], where
    assert [p['perplexity'] for p in resumed['dev_curve']] == pytest.approx(
        [p['perplexity'] for p in uninterrupted['dev_curve']], rel=1e-6), where
    for key in ('together', 'checkpoint_steps', 'model', 'steps'):
      assert resumed[key] == uninterrupted[key], (row, key, where)

  # Killed after the group's first row's file was written, before the second's: the group's
  # file, removed once every row's file is written, still there.
  written = (results / 'drop.json').read_text()
  mtime = os.path.getmtime(results / 'small.json')
  group_file = workdir / 'small' / sweep_group.GROUP_RESULTS
  assert not group_file.exists()
  group_file.write_text(json.dumps([json.loads((results / f'{row}.json').read_text())
                                    for row in group]))
  os.remove(results / 'drop.json')
  capsys.readouterr()
  sweep_run.run(swept.sweep, str(workdir), group, str(results), SWEPT_OVERRIDES, together=2)
  assert capsys.readouterr().out.count('done already') == 2
  assert (results / 'drop.json').read_text() == written
  assert os.path.getmtime(results / 'small.json') == mtime
  assert not group_file.exists()


def test_a_removed_flag_names_what_replaces_it(tmp_path):
  result = _sweep(f'--sweep={_sweep_file(tmp_path)}', f'--workdir={tmp_path / "run"}',
                  '--concurrent=2')
  assert result.returncode != 0
  assert '--concurrent was removed' in result.stderr and '--together' in result.stderr
  assert not (tmp_path / 'run').exists()


def test_a_row_whose_training_stopped_early_is_not_evaluated(tmp_path, monkeypatch):
  # What a preempted training run leaves: it returns, with checkpoints short of the last step.
  workdir = tmp_path / 'row'
  config = train_config(**{'train.num_train_steps': 20})

  def preempted(configs, dirs, data_cache, programs, devices, notice):
    assert dirs == [str(workdir)]
    saved_config.write_config(config, str(workdir))
    for step in ('10', '12', '20.orbax-checkpoint-tmp-1'):  # step 20 never finished writing
      os.makedirs(workdir / 'checkpoints' / step)
    return [{}]

  def evaluated(*args, **kwargs):
    raise AssertionError('evaluated an unfinished row')

  monkeypatch.setattr(sweep_group, 'train_together', preempted)
  monkeypatch.setattr(sweep_group, 'Translator', evaluated)
  with pytest.raises(RuntimeError, match='row stopped at step 12 of 20 .*run the sweep again'):
    sweep_group.run_group(['row'], {'row': config}, str(tmp_path), [], 'cpu', {})


def test_a_failed_group_names_its_rows_and_its_log_holds_what_it_printed(tmp_path,
                                                                        monkeypatch):
  def failing(configs, dirs, data_cache, programs, devices, notice):
    print('step 3: something printed')
    raise ValueError('a NaN')

  monkeypatch.setattr(sweep_group, 'train_together', failing)
  config = train_config()
  with pytest.raises(RuntimeError, match='training small, drop: a NaN'):
    sweep_group.run_group(['small', 'drop'], {'small': config, 'drop': config}, str(tmp_path),
                        [], 'cpu', {})
  assert 'step 3: something printed' in (tmp_path / 'small' / 'sweep.log').read_text()


def test_training_time_is_saved_while_it_runs_and_adds_up_over_attempts(tmp_path, monkeypatch):
  # A sweep killed part-way loses nothing but the last few seconds: the file holds an earlier
  # attempt's 100 s plus this one's time so far, while it runs.
  monkeypatch.setattr(sweep_group, 'SAVE_SECONDS_EVERY', 0.05)
  timing = tmp_path / 'seconds.json'
  timing.write_text('100.0')
  with sweep_group._timed(str(timing)) as seconds:  # pylint: disable=protected-access
    time.sleep(0.5)
    seen = json.loads(timing.read_text())
  assert 100.3 < seen < seconds() == json.loads(timing.read_text())
  time.sleep(0.1)
  assert seconds() == json.loads(timing.read_text())  # the block's time, not counted on


def _fake_rows(tmp_path, monkeypatch, fail: str | None = None) -> list:
  """run.run with run_group replaced by rows that take 0.05 s each (or fail, for `fail`), and
  nothing compiled ahead for them; returns the rows that ran, in order."""
  ran = []
  monkeypatch.setattr(tables, 'write_table', lambda *args: None)
  monkeypatch.setattr(sweep_ahead, 'compile_ahead',
                      lambda configs, dirs, data_cache, devices: None)

  def fake_group(group, configs, workdir, overrides, device_kind, data_cache, compiled, devices,
                 notice):
    for row in group:  # the workdirs run_group makes (local or in a bucket)
      epath.Path(workdir, row).mkdir(parents=True, exist_ok=True)
    finished = []
    for row in group:
      time.sleep(0.05)
      ran.append(row)
      if row == fail:
        raise RuntimeError(f'{row} failed')
      finished.append({'row': row, 'perplexity': 5.0, 'bleu_tokenized': 30.0,
                       'train_seconds': 0.3, 'steps': 20, 'eval_seconds': 0.0,
                       'together': {'rows': group},
                       'provenance': {'machine': {'device': device_kind,
                                                  'devices': len(devices)}}})
    return finished

  monkeypatch.setattr(sweep_group, 'run_group', fake_group)
  return ran


def test_after_a_failed_row_no_new_row_starts(tmp_path, monkeypatch):
  ran = _fake_rows(tmp_path, monkeypatch, fail='small')
  with pytest.raises(RuntimeError, match='small failed'):
    sweep_run.run(_sweep_file(tmp_path), str(tmp_path / 'run'), ['small', 'wide'],
                  str(tmp_path / 'results'))
  assert ran == ['small']
  assert not os.path.exists(tmp_path / 'results' / 'small.json')


def test_a_row_whose_file_is_deleted_runs_again(tmp_path, monkeypatch):
  ran = _fake_rows(tmp_path, monkeypatch)
  args = (_sweep_file(tmp_path), str(tmp_path / 'run'), ['small', 'wide'],
          str(tmp_path / 'results'))
  sweep_run.run(*args)
  os.remove(tmp_path / 'results' / 'wide.json')
  sweep_run.run(*args)
  assert ran == ['small', 'wide', 'wide']


def _finished(group: list[str], train_seconds: float, steps: int, eval_seconds: float,
              device: str = 'cpu', together: bool = False, devices: int | None = None) -> dict:
  """The JSONs of a group's rows as the sweep writes them, with what the prediction reads
  (rows evaluated one by one, or `together` as one program: its time in each)."""
  return {row: {'row': row, 'train_seconds': train_seconds, 'steps': steps,
                'eval_seconds': eval_seconds, 'together': {'rows': group},
                **({'evaluated_together': True} if together else {}),
                'provenance': {'machine': {'device': device,
                                           **({} if devices is None else {'devices': devices})}}}
          for row in group}


def test_a_groups_time_is_predicted_from_the_slowest_finished_group_of_its_size():
  results = {**_finished(['a', 'b'], 100.0, 1000, 10.0), **_finished(['c', 'd'], 150.0, 1000, 5.0),
             **_finished(['e', 'f'], 900.0, 1000, 5.0, device='H200'),
             **_finished(['g'], 50.0, 1000, 3.0),
             **_finished(['h', 'i', 'j'], 90.0, 1000, 12.0, together=True)}
  # (c, d): 0.15 s a step for 2000 steps, and two evaluations of 5 s; (a, b) gives 220 s.
  assert plan.predicted_seconds(results, 2, 2000, 'cpu') == pytest.approx(310.0)
  assert plan.predicted_seconds(results, 2, 2000, 'H200') == pytest.approx(1810.0)
  assert plan.predicted_seconds(results, 1, 500, 'cpu') == pytest.approx(28.0)
  # Evaluated as one program: its 12 s counted once, not a row.
  assert plan.predicted_seconds(results, 3, 2000, 'cpu') == pytest.approx(192.0)
  assert plan.predicted_seconds(results, 4, 2000, 'cpu') is None  # no group of 4 yet
  assert plan.predicted_seconds({}, 2, 2000, 'cpu') is None


def test_the_plan_finishes_the_most_rows_in_the_time_given():
  """The groups whose predicted times fit with the most rows, the fewest seconds among equals,
  in row order, then those not predicted; the others passed over. Brute force over every
  subset is the reference."""
  import itertools  # pylint: disable=import-outside-toplevel
  groups = [['a', 'a1'], ['b'], ['c', 'c1', 'c2'], ['d'], ['e', 'e1'], ['u', 'u1']]
  seconds = {('a', 'a1'): 50.0, ('b',): 40.0, ('c', 'c1', 'c2'): 70.0, ('d',): 25.5,
             ('e', 'e1'): 120.0, ('u', 'u1'): None}
  for budget in (0, 30, 60, 100, 140, 200, 400):
    chosen = plan.plan(groups, seconds, budget)
    known = [g for g in groups if seconds[tuple(g)] is not None]
    fits = [subset for k in range(len(known) + 1) for subset in itertools.combinations(known, k)
            if sum(-(-seconds[tuple(g)] // 1) for g in subset) <= budget]
    best = max(fits, key=lambda subset: (sum(map(len, subset)),
                                         -sum(seconds[tuple(g)] for g in subset)))
    assert chosen.start == [g for g in known if g in best] + [['u', 'u1']], budget
    assert chosen.passed_over == [g for g in known if g not in best], budget
  assert plan.plan(groups, seconds, None).start == groups  # no deadline: all, in order
  text = plan.plan(groups, seconds, 100).describe(100)
  assert 'c, c1, c2: 70 s predicted' in text and 'u, u1: not predicted' in text
  assert text.index('not expected to finish') < text.index('a, a1: 50 s predicted')


def test_the_plan_over_slots_fills_each_within_the_deadline_and_balances_without_one():
  """With 3 slots and a deadline: every predicted group in one slot or passed over, each slot's
  predicted seconds within the time left, no group passed over that fits in a slot's time left,
  the first slot's groups the most rows that fit (the one-slot knapsack), the groups not
  predicted after the predicted ones, spread over the slots; without a deadline, every group to
  the slot with the fewest predicted seconds so far, in row order."""
  groups = [['a', 'a1'], ['b'], ['c', 'c1', 'c2'], ['d'], ['e', 'e1'], ['f'], ['u'], ['v', 'v1']]
  seconds = {('a', 'a1'): 50.0, ('b',): 40.0, ('c', 'c1', 'c2'): 70.0, ('d',): 25.5,
             ('e', 'e1'): 120.0, ('f',): 90.0, ('u',): None, ('v', 'v1'): None}
  known = [g for g in groups if seconds[tuple(g)] is not None]
  for budget in (0, 30, 60, 100, 140, 400):
    chosen = plan.plan(groups, seconds, budget, slots=3)
    assert len(chosen.queues) == 3
    placed = [g for slot in chosen.queues for g in slot if seconds[tuple(g)] is not None]
    assert sorted(placed + chosen.passed_over) == sorted(known), budget
    used = [sum(-(-seconds[tuple(g)] // 1) for g in slot if seconds[tuple(g)] is not None)
            for slot in chosen.queues]
    assert all(u <= budget for u in used), budget
    for group in chosen.passed_over:
      assert all(u + seconds[tuple(group)] > budget for u in used), (budget, group)
    one_slot = plan.plan(groups, seconds, budget)
    assert [g for g in chosen.queues[0] if seconds[tuple(g)] is not None] == [
        g for g in one_slot.start if seconds[tuple(g)] is not None], budget
    for slot in chosen.queues:  # the predicted first, each part in row order
      predicted = [seconds[tuple(g)] is None for g in slot]
      assert predicted == sorted(predicted)
      assert all(groups.index(a) < groups.index(b) for a, b in zip(slot, slot[1:])
                 if (seconds[tuple(a)] is None) == (seconds[tuple(b)] is None))
    assert sorted(g for slot in chosen.queues for g in slot
                  if seconds[tuple(g)] is None) == [['u'], ['v', 'v1']]
  balanced = plan.plan(groups, seconds, None, slots=3)
  assert balanced.passed_over == []
  loads = [0.0] * 3
  for group in groups:  # the reference: least loaded slot first, the fewest groups among equals
    counts = [len([g for g in slot if groups.index(g) < groups.index(group)])
              for slot in balanced.queues]
    slot = min(range(3), key=lambda i: (loads[i], counts[i], i))
    assert group in balanced.queues[slot], group
    loads[slot] += seconds[tuple(group)] or 0.0
  text = balanced.describe(None)
  assert ' slot 0 (' in text and ' slot 2 (' in text


def test_a_group_predicted_to_end_after_the_deadline_is_not_started(tmp_path, monkeypatch, capsys):
  """With --stop_after_minutes, the plan printed first; a group that the finished groups of its
  size on this device say would end too late is passed over (named), a smaller one still starts,
  and a group of a size never measured starts while time is left, not after; the steps a cut-off
  group has already trained are not counted again."""
  ran = _fake_rows(tmp_path, monkeypatch)
  results = tmp_path / 'results'
  results.mkdir()
  rows = {'x': {}, 'x_seed1': {'seed': 1}, 'y': {'model.d_ff': 96}, 'pair': {},
          'pair_seed1': {'seed': 1}, 'wide': {'model.d_ff': 128},
          **{f'triple_seed{i}': {'seed': i} for i in (2, 3, 4)}}
  sweep = _sweep_file(tmp_path, rows)
  device = jax.devices()[0].device_kind
  # Groups finished earlier on this device: two rows of 20 steps in 130 s; one row in 10 s.
  devices = len(jax.local_devices())  # each group's, by default
  for name, result in {**_finished(['x', 'x_seed1'], 120.0, 20, 5.0, device, devices=devices),
                       **_finished(['y'], 8.0, 20, 2.0, device, devices=devices)}.items():
    (results / f'{name}.json').write_text(json.dumps(result))
  sweep_run.run(sweep, str(tmp_path / 'run'), ['pair', 'pair_seed1', 'wide'], str(results),
                together=2, stop_after_minutes=1.0)
  assert ran == ['wide']  # 130 s > 60 s left; 10 s fit
  out = capsys.readouterr().out
  assert out.index('plan for') < out.index('wide: training in')
  assert 'not expected to finish, not started:\n  pair, pair_seed1: 130 s predicted' in out
  assert 'not started before --stop_after_minutes=1: pair, pair_seed1' in out
  # Cut off at step 15 in an earlier call: 5 steps left, 40 s predicted, so it starts.
  monkeypatch.setattr(checkpointing, 'saved_steps', lambda workdir: [15] if 'pair' in workdir
                      else [])
  sweep_run.run(sweep, str(tmp_path / 'run'), ['pair', 'pair_seed1', 'wide'], str(results),
                together=2, stop_after_minutes=1.0)
  assert ran == ['wide', 'pair', 'pair_seed1']
  # A size not measured on this device (no group of 3 has finished): not started past the
  # deadline, started while time is left.
  triple = [f'triple_seed{i}' for i in (2, 3, 4)]
  capsys.readouterr()
  sweep_run.run(sweep, str(tmp_path / 'run'), triple, str(results), together=3,
                stop_after_minutes=0)
  assert ran[3:] == []
  assert ('triple_seed2, triple_seed3, triple_seed4: not started: not predicted, 0 s left'
          in capsys.readouterr().out)
  sweep_run.run(sweep, str(tmp_path / 'run'), triple, str(results), together=3,
                stop_after_minutes=1.0)
  assert ran[3:] == triple


def test_each_rows_config_is_checked_once_where_it_enters_the_sweep(tmp_path, monkeypatch):
  """The sweep checks each row's config (with the overrides) once, before anything trains:
  not again to group the rows, predict a group's time or start its training."""
  _fake_rows(tmp_path, monkeypatch)
  checked, check = [], checks.validate

  def counted(config):
    checked.append((config.seed, config.model.d_ff, config.model.dropout_rate,
                    config.train.label_smoothing, config.model.attention_dropout_rate))
    check(config)

  monkeypatch.setattr(checks, 'validate', counted)
  sweep_run.run(_sweep_file(tmp_path, GROUPABLE), str(tmp_path / 'run'), list(GROUPABLE),
                str(tmp_path / 'results'), ['model.attention_dropout_rate=0.05'], together=2,
                stop_after_minutes=60)
  assert len(checked) == len(GROUPABLE) == len(set(checked))
  assert {row[-1] for row in checked} == {0.05}


def test_the_tables_are_named_after_the_sweep_file():
  assert tables.table_name('experiments/table3_regularised/sweep.py') == 'table3_regularised'
  assert tables.table_name('/tmp/my_rows.py') == 'my_rows'


@pytest.mark.slow
def test_unknown_rows_are_an_error_before_training(tmp_path):
  result = _sweep(f'--sweep={_sweep_file(tmp_path)}', f'--workdir={tmp_path / "run"}',
                  '--rows=small,F9')
  assert result.returncode != 0
  assert 'F9 not in' in result.stderr
  assert not (tmp_path / 'run').exists()


def test_overrides_are_parsed_as_train_parses_them(tmp_path):
  sweep = loading.load_sweep(_sweep_file(tmp_path))
  config = plan.row_config(sweep, 'wide', ['model.dropout_rate=0.25', 'train.grad_accum_steps=2'])
  assert config.model.dropout_rate == 0.25 and config.train.grad_accum_steps == 2
  assert config.model.d_ff == 128  # the row's own change stays
  with pytest.raises(ValueError, match='must be a positive integer'):
    plan.row_config(sweep, 'wide', ['train.grad_accum_steps=0'])


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
  (configs/table3.py), widths, N and steps by the paper's factor over its base (big trains 3
  times as long), dropout and smoothing to the paper's values; only big's checkpoint spacing,
  which Table 3's evaluation does not use, is not copied."""
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
                   'model.num_layers', 'train.num_train_steps'):
        assert value / mini_base[field] == paper[field] / paper_base[field], (row, field)
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
  configs = {row: plan.row_config(sweep, row, []) for row in GROUPABLE}
  assert plan.groups(configs, together) == want
