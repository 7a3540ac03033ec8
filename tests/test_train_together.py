"""Runs trained together end to end (`runs_together.train_together`): each workdir is its run's as
if trained alone on the same batches, the group resumes exactly, and a NaN in one run stops the
group naming that run."""

import json
import os
import shutil

from flax import traverse_util
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import assert_trained_alike, metrics_lines, short_run, train_config
from transformer_jax.config import platforms
from transformer_jax.decoding import scoring
from transformer_jax.decoding.translator import GroupTranslator, Translator
from transformer_jax.loop import runs_together, train_loop
from transformer_jax.training import checkpointing, compilation, metrics_log, saved_config
from transformer_jax.training.trainer import Trainer

pytestmark = pytest.mark.slow

STEPS = 12
# Two runs differing in the seed, the dropout rate and label smoothing.
RUNS = [{'seed': 1, 'model.dropout_rate': 0.1, 'train.label_smoothing': 0.1},
        {'seed': 2, 'model.dropout_rate': 0.2, 'train.label_smoothing': 0.0}]


@pytest.fixture(scope='module')
def overrides() -> dict:
  return short_run(STEPS)


def _records(workdir: str, split: str) -> dict[int, dict]:
  return {r['step']: r for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] == split}


def _flat(config) -> dict:
  """Every field of `config`, as its JSON file holds it (tuples as lists)."""
  return traverse_util.flatten_dict(json.loads(config.to_json()), sep='.')


def _params(workdir: str, step: int):
  return ocp.StandardCheckpointer().restore(
      os.path.join(workdir, 'checkpoints', str(step), 'params'))


@pytest.fixture(scope='module')
def together(overrides, tmp_path_factory) -> list[str]:
  dirs = [str(tmp_path_factory.mktemp(f'run{i}')) for i in range(2)]
  runs_together.train_together([train_config(**overrides, **run) for run in RUNS], dirs)
  return dirs


def test_each_workdir_holds_its_run_and_the_second_trained_alone_matches_it(
    together, overrides, tmp_path):
  # Each workdir holds its run's config, the first run's batch order written in as
  # data.shuffle_seed. The second run, whose own seed is not that order's, again, alone, from
  # that config: every step's loss, the dev figures and the parameters. (Every run of a group
  # against itself alone, the first's included: tests/test_together.py.)
  for run, workdir in zip(RUNS, together):
    saved = saved_config.load_config(workdir)
    assert saved.seed == run['seed'] and saved.data.shuffle_seed == RUNS[0]['seed']
    # Every other field is the run's own (its dropout rate and label smoothing among them),
    # every 'auto' resolved for this platform.
    own = platforms.resolved(train_config(**overrides, **run))
    own.data.shuffle_seed = RUNS[0]['seed']
    assert _flat(saved) == _flat(own)
    assert os.path.exists(os.path.join(workdir, 'spm.model'))
    assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['12', '8']
  workdir = together[1]
  saved = saved_config.load_config(workdir)
  alone = str(tmp_path / os.path.basename(workdir))
  train_loop.train_and_evaluate(saved, alone)
  got, want = _records(workdir, 'train'), _records(alone, 'train')
  assert sorted(got) == list(range(1, STEPS + 1))
  np.testing.assert_allclose([got[s]['loss'] for s in got], [want[s]['loss'] for s in got],
                             rtol=1e-4)
  for name in ('loss', 'nll', 'bleu'):
    assert _records(workdir, 'validation')[STEPS][name] == pytest.approx(
        _records(alone, 'validation')[STEPS][name], rel=1e-4, abs=1e-6)
  jax.tree.map(assert_trained_alike, _params(workdir, STEPS), _params(alone, STEPS))
  # Two different runs: their losses differ.
  assert _records(together[0], 'train')[STEPS]['loss'] != pytest.approx(
      _records(together[1], 'train')[STEPS]['loss'], rel=1e-3)


def test_runs_interrupted_together_resume_exactly(together, overrides, tmp_path):
  # The group's workdirs as a kill between its runs' saves of step 12 leaves them: the first
  # run's step 12 saved, the second's not (the logs may hold later steps; readers keep each
  # step's last record). Both resume from step 8, the newest both saved; the first's step 12,
  # of a save the group did not finish, is moved aside, not deleted.
  dirs = [str(tmp_path / f'run{i}') for i in range(2)]
  for source, workdir in zip(together, dirs):
    shutil.copytree(source, workdir)
  shutil.rmtree(os.path.join(dirs[1], 'checkpoints', str(STEPS)))
  logged = [len(metrics_lines(workdir)) for workdir in dirs]
  runs_together.train_together([train_config(**overrides, **run) for run in RUNS], dirs)
  assert sorted(os.listdir(os.path.join(dirs[0], 'checkpoints'))) == ['12', '12.unfinished', '8']
  for workdir, uninterrupted, before in zip(dirs, together, logged):
    # The call went on from step 8's checkpoint, not from the start.
    resumed = metrics_lines(workdir)[before:]
    assert [r['step'] for r in resumed if r['split'] == 'data'] == [8]
    assert [r['step'] for r in resumed if r['split'] == 'train'] == list(range(9, STEPS + 1))
    np.testing.assert_allclose(_records(workdir, 'train')[STEPS]['loss'],
                               _records(uninterrupted, 'train')[STEPS]['loss'], rtol=1e-5)
    jax.tree.map(assert_trained_alike, _params(workdir, STEPS), _params(uninterrupted, STEPS))


def test_a_group_that_keeps_one_checkpoint_resumes_after_a_crash_between_its_saves(
    together, overrides, tmp_path, monkeypatch):
  # With train.keep_checkpoints=1 the group crashes before the second run saves step 12. Each
  # run keeps the step before its newest while the group trains, so both resume from step 8
  # (the first's 12 moved aside) and end as the uninterrupted group, their step 8 kept whole
  # (where a damaged 12 would fall back to).
  dirs = [str(tmp_path / f'run{i}') for i in range(2)]
  configs = [train_config(**{**overrides, 'train.keep_checkpoints': 1}, **run) for run in RUNS]
  save = checkpointing.Checkpoints.save

  def crashing(self, step, state, data_state):
    if step == STEPS and str(self._manager.directory).startswith(dirs[1]):
      raise OSError('disk gone')
    return save(self, step, state, data_state)

  with monkeypatch.context() as patch:
    patch.setattr(checkpointing.Checkpoints, 'save', crashing)
    with pytest.raises(OSError, match='disk gone'):
      runs_together.train_together(configs, dirs)
  assert [checkpointing.saved_steps(workdir) for workdir in dirs] == [[8, STEPS], [4, 8]]
  runs_together.train_together(configs, dirs)
  assert sorted(os.listdir(os.path.join(dirs[0], 'checkpoints'))) == ['12', '12.unfinished',
                                                                       '8']
  assert sorted(os.listdir(os.path.join(dirs[1], 'checkpoints'))) == ['12', '8']
  for workdir, uninterrupted in zip(dirs, together):
    np.testing.assert_allclose(_records(workdir, 'train')[STEPS]['loss'],
                               _records(uninterrupted, 'train')[STEPS]['loss'], rtol=1e-5)
    jax.tree.map(assert_trained_alike, _params(workdir, STEPS), _params(uninterrupted, STEPS))


def test_a_step_one_run_cannot_read_is_trained_again_by_every_run(together, overrides,
                                                                   tmp_path):
  # The second run's step 12 damaged (its parameters' files emptied): both runs resume from
  # step 8, the newest that both can read, rather than the first from 12 and the second from 8
  # joined under step 12; the first's 12 moved to 12.unfinished, the second's to 12.corrupt.
  dirs = [str(tmp_path / f'run{i}') for i in range(2)]
  for source, workdir in zip(together, dirs):
    shutil.copytree(source, workdir)
  state = os.path.join(dirs[1], 'checkpoints', str(STEPS), 'params')
  for root, _, files in os.walk(state):
    for name in files:
      if name not in ('_METADATA', '_CHECKPOINT_METADATA', 'manifest.ocdbt'):
        open(os.path.join(root, name), 'w').close()
  logged = [len(metrics_lines(workdir)) for workdir in dirs]
  further = {**overrides, 'train.num_train_steps': STEPS + 4}  # step 12 is not the last
  runs_together.train_together([train_config(**further, **run) for run in RUNS], dirs)
  assert sorted(os.listdir(os.path.join(dirs[0], 'checkpoints'))) == ['12', '12.unfinished',
                                                                       '16']
  assert sorted(os.listdir(os.path.join(dirs[1], 'checkpoints'))) == ['12', '12.corrupt', '16']
  for workdir, uninterrupted, before in zip(dirs, together, logged):
    resumed = metrics_lines(workdir)[before:]
    assert [r['step'] for r in resumed if r['split'] == 'train'] == list(range(9, STEPS + 5))
    np.testing.assert_allclose(_records(workdir, 'train')[STEPS]['loss'],
                               _records(uninterrupted, 'train')[STEPS]['loss'], rtol=1e-5)


def test_a_nan_in_one_run_stops_the_group_naming_it(overrides, tmp_path, monkeypatch):
  original = Trainer.step

  def poisoned(self, state, batch, hyper=None):  # the second run's loss NaN from step 6 on
    new_state, metrics = original(self, state, batch, hyper)
    bad = (hyper['model.dropout_rate'] > 0.15) & (state.step >= 5)
    metrics['loss'] = jax.numpy.where(bad, jax.numpy.nan, metrics['loss'])
    return new_state, metrics

  monkeypatch.setattr(Trainer, 'step', poisoned)
  dirs = [str(tmp_path / f'run{i}') for i in range(2)]
  with pytest.raises(FloatingPointError, match=f'at step 6 of {dirs[1]}'):
    runs_together.train_together([train_config(**overrides, **run) for run in RUNS], dirs)
  for workdir in dirs:
    assert os.listdir(os.path.join(workdir, 'checkpoints')) == ['4']


def test_runs_saved_at_different_steps_are_refused(together, overrides, tmp_path):
  fresh = str(tmp_path / 'fresh')
  with pytest.raises(ValueError, match=f'checkpoints are at {together[0]}: 12, {fresh}: none'):
    runs_together.train_together([train_config(**overrides, **run) for run in RUNS],
                         [together[0], fresh])
  assert not os.path.exists(os.path.join(fresh, 'config.json'))  # refused before any work


def test_the_runs_evaluated_as_one_program_score_as_each_alone(together, tmp_path):
  """Table 3's evaluation of the group as one program (`GroupTranslator`, `scoring.evaluate_runs`:
  the parameters stacked, the decoder and the loss vmapped): each run's hypotheses are those it
  decodes alone, its BLEU the same and its perplexity within 1e-5; the group's evaluation makes
  as many programs as one run's (a decoder and a loss a shape, whatever the number of runs)."""
  settings = {'beam_size': 4, 'alpha': 0.6, 'average_last': 1}
  together = [shutil.copytree(workdir, tmp_path / f'run{i}') for i, workdir in enumerate(together)]
  together = [str(workdir) for workdir in together]
  translator = GroupTranslator(together, **settings)
  before = compilation.so_far()
  group = scoring.evaluate_runs(translator, 'validation')
  group_programs = compilation.so_far() - before
  group_hypotheses = [open(r['hypotheses'], encoding='utf-8').read() for r in group]
  assert [r['checkpoint_steps'] for r in group] == [[STEPS], [STEPS]]
  for workdir, row, hypotheses in zip(together, group, group_hypotheses):
    translator = Translator(workdir, **settings)
    before = compilation.so_far()
    alone = scoring.evaluate(translator, 'validation')
    if workdir == together[0]:
      programs = compilation.so_far() - before
      assert (group_programs.compiled + group_programs.loaded
              == programs.compiled + programs.loaded > 0)
    assert open(alone['hypotheses'], encoding='utf-8').read() == hypotheses
    assert row['bleu_tokenized'] == alone['bleu_tokenized']
    assert row['bleu_detokenized'] == alone['bleu_detokenized']
    assert row['perplexity'] == pytest.approx(alone['perplexity'], rel=1e-5)
  assert group[0]['perplexity'] != pytest.approx(group[1]['perplexity'], rel=1e-3)
