"""The platform's defaults (`config.platforms`): 'auto' resolved on a CPU to the values the
configs held before they said 'auto', on GPUs and TPUs to the accelerator defaults; a user's
value wins; the resolved config is what a workdir records; cuDNN attention off a GPU or in
float32 is refused before anything is built; and the disk a run's workdir holds
(`training.footprint`) against the count of its parameters."""

import json
import os
import time

import pytest

from conftest import REPO
from transformer_jax.config import checks, fields, loading, platforms
from transformer_jax.loop import train_loop
from transformer_jax.model import costs, model_config
from transformer_jax.training import footprint, saved_config

CONFIGS = ('base', 'big', 'multi30k', 'tiny')
# What each config held before its fields said 'auto' (git show 41cd033:configs/...), but
# keep_checkpoints, which 'auto' makes decode.average_last on every platform.
BEFORE = {'dtype': 'float32', 'train.dropout_prng_impl': 'threefry2x32', 'train.loss_chunk': 8,
          'train.steps_per_call': 1}


def _config(name: str):
  return loading.from_file(os.path.join(REPO, 'configs', f'{name}.py'))


@pytest.mark.parametrize('name', CONFIGS)
def test_a_cpu_resolves_every_auto_to_the_value_before_it(name):
  config = _config(name)
  resolved = fields.flatten(platforms.resolved(config, 'cpu'))
  given = fields.flatten(config)
  for field, before in BEFORE.items():
    assert resolved[field] == (before if given[field] == 'auto' else given[field]), field
  # BLEU at every evaluation, as before there was a choice.
  assert resolved['train.bleu_every_steps'] == given['train.eval_every_steps']
  assert resolved['train.keep_checkpoints'] == (
      given['decode.average_last'] if given['train.keep_checkpoints'] == 'auto'
      else given['train.keep_checkpoints'])
  # Nothing else changes.
  assert {f: v for f, v in resolved.items() if f not in platforms.AUTO_FIELDS} == {
      f: v for f, v in given.items() if f not in platforms.AUTO_FIELDS}


@pytest.mark.parametrize('platform', ['gpu', 'tpu'])
def test_accelerators_compute_in_bfloat16_with_many_steps_a_call(platform):
  base = platforms.resolved(_config('base'), platform)
  assert (base.dtype, base.train.dropout_prng_impl, base.train.loss_chunk) == (
      'bfloat16', 'rbg', 16)
  assert base.train.bleu_every_steps == 20000 and base.train.keep_checkpoints == 5
  assert base.train.steps_per_call == 20
  # Checkpoints every 600 steps and evaluations every 1000 fall between calls of 20 steps.
  big = platforms.resolved(_config('big'), platform)
  assert big.train.steps_per_call == 20 and big.train.keep_checkpoints == 20
  checks.validate(big)


def test_the_steps_a_call_divide_both_intervals():
  for every, evaluations in [(1500, 5000), (300, 1000), (7, 5000), (24, 36)]:
    k = platforms.steps_per_call(every, evaluations, accelerator=True)
    assert every % k == 0 and evaluations % k == 0 and k <= platforms.STEPS_PER_CALL
    assert not any(every % bigger == 0 and evaluations % bigger == 0
                   for bigger in range(k + 1, platforms.STEPS_PER_CALL + 1))
  assert platforms.steps_per_call(1500, 5000, accelerator=False) == 1


def test_a_value_the_user_gives_wins():
  config = fields.overridden(_config('base'), [
      'dtype=float32', 'train.steps_per_call=4', 'train.loss_chunk=0',
      'train.dropout_prng_impl=threefry2x32', 'train.bleu_every_steps=1000',
      'train.keep_checkpoints=7'])
  checks.validate(config)
  resolved = platforms.resolved(config, 'gpu')
  assert (resolved.dtype, resolved.train.steps_per_call, resolved.train.loss_chunk) == (
      'float32', 4, 0)
  assert resolved.train.dropout_prng_impl == 'threefry2x32'
  assert (resolved.train.bleu_every_steps, resolved.train.keep_checkpoints) == (1000, 7)
  # A loss chunk of 16 would pad the fine buckets (multiples of 8): 'auto' is then 8.
  fine = fields.overridden(_config('base'), ['data.buckets=fine'])
  assert platforms.resolved(fine, 'gpu').train.loss_chunk == 8


def test_a_bad_value_of_an_auto_field_names_it_and_auto():
  with pytest.raises(ValueError, match=r"config.train.steps_per_call must be a positive "
                                       r"integer or 'auto', got 'eight'"):
    checks.validate(fields.overridden(_config('base'), ['train.steps_per_call=eight']))
  with pytest.raises(ValueError, match=r"config.dtype must be one of .* or 'auto'"):
    checks.validate(fields.overridden(_config('base'), ['dtype=float16']))


def test_the_workdir_records_the_resolved_config(tmp_path):
  saved_config.write_config(_config('base'), str(tmp_path))
  with open(tmp_path / saved_config.CONFIG_FILENAME) as f:
    saved = fields.flatten(saved_config.load_config(str(tmp_path)))
  assert 'auto' not in [saved[field] for field in platforms.AUTO_FIELDS]
  assert saved == fields.flatten(platforms.resolved(_config('base'), 'cpu'))
  assert json.load(open(tmp_path / saved_config.CONFIG_FILENAME))['dtype'] == 'float32'


@pytest.mark.parametrize('overrides, platform', [
    (['model.attention_impl=cudnn'], 'cpu'),
    (['model.attention_impl=cudnn', 'dtype=float32'], 'gpu'),
    (['model.attention_impl=cudnn'], 'tpu')])
def test_cudnn_attention_where_it_cannot_run_is_refused_naming_the_field(overrides, platform):
  config = fields.overridden(_config('base'), overrides)
  checks.validate(config)
  with pytest.raises(ValueError, match=r"config.model.attention_impl='cudnn'"):
    platforms.resolved(config, platform)
  assert platforms.resolved(fields.overridden(_config('base'), overrides[:1]),
                            'gpu').model.attention_impl == 'cudnn'


def test_a_run_trained_with_cudnn_attention_is_read_off_a_gpu_with_xlas(tmp_path):
  config = platforms.resolved(fields.overridden(_config('base'), ['model.attention_impl=cudnn']),
                              'gpu')
  assert platforms.for_reading(config, 'gpu').model.attention_impl == 'cudnn'
  for platform in ('cpu', 'tpu'):
    assert platforms.for_reading(config, platform).model.attention_impl == 'xla'
  assert config.model.attention_impl == 'cudnn'  # a copy changed, not the run's config
  # As the workdir's readers (translate, evaluate, average, export) read it on this CPU.
  with open(tmp_path / saved_config.CONFIG_FILENAME, 'w') as f:
    f.write(config.to_json_best_effort())
  assert saved_config.load_config(str(tmp_path)).model.attention_impl == 'xla'


def test_a_run_with_cudnn_attention_on_a_cpu_stops_before_anything_is_built(tmp_path):
  config = fields.overridden(_config('tiny'), ['model.attention_impl=cudnn'])
  checks.validate(config)
  start = time.perf_counter()
  with pytest.raises(ValueError, match='attention_impl'):
    train_loop.train_and_evaluate(config, str(tmp_path))
  assert time.perf_counter() - start < 10 and os.listdir(tmp_path) == []


def test_the_workdir_holds_the_kept_parameters_and_two_optimizer_states():
  """Base at its end: the 5 checkpoints §6.1 averages (100000, the last step, and 99000 back to
  94500), each its parameters in float32; 100000 and 99000 also Adam's two moments; and the
  training split's token ids."""
  config = platforms.resolved(_config('base'), 'gpu')
  assert footprint.saved_steps(config)[-6:] == [93000, 94500, 96000, 97500, 99000, 100000]
  disk = footprint.workdir_bytes(config)
  params = costs.param_counts(model_config.from_config(config))['total']
  assert (disk['checkpoints_kept'], disk['checkpoints_whole']) == (5, 2)
  # Adam's state adds its step counts (a few int32 scalars) to the two moments.
  assert 0 <= disk['checkpoint_bytes'] - (5 * 4 * params + 2 * 2 * 4 * params) < 64
  before = footprint.workdir_bytes(fields.overridden(config, ['train.keep_checkpoints=20']),
                                   thinned=False)
  assert before['checkpoints_kept'] == 21 and before['checkpoints_whole'] == 21
  assert disk['workdir_bytes'] < 3e9 < 15e9 < before['workdir_bytes']
