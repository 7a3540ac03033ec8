"""FLOPs and parameter counts, the summary command, and the benchmark's input check."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, tiny_config, train_config
from transformer_jax import benchmark
from transformer_jax.config import loading
from transformer_jax.model import costs, model_config
from transformer_jax.model.transformer import Transformer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
table3 = loading.import_sibling(__file__, '../configs/table3')


def _dot_flops(jaxpr) -> int:
  """2 x multiply-adds of every dot_general in a jaxpr, sub-jaxprs included."""
  total = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      (lhs_contract, _), (lhs_batch, _) = eqn.params['dimension_numbers']
      lhs = eqn.invars[0].aval.shape
      out = eqn.outvars[0].aval.shape
      total += 2 * int(np.prod(out)) * int(np.prod([lhs[d] for d in lhs_contract]))
    for value in eqn.params.values():  # the bodies of scans, remat, custom_vjp, ...
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        sub = getattr(sub, 'jaxpr', sub)  # a ClosedJaxpr's Jaxpr
        if hasattr(sub, 'eqns'):
          total += _dot_flops(sub)
  return total


@pytest.mark.slow
@pytest.mark.parametrize('options', [dict(), dict(share_embeddings=False, num_layers=3)])
def test_forward_flops_equal_the_matmuls_xla_is_given(options):
  cfg = tiny_config(**options)
  params = init_params(cfg)
  source_length, target_length = 7, 5
  jaxpr = jax.make_jaxpr(Transformer(cfg).apply)(
      {'params': params}, jnp.ones((1, source_length), jnp.int32),
      jnp.ones((1, target_length), jnp.int32))
  assert _dot_flops(jaxpr.jaxpr) == costs.forward_flops(cfg, source_length, target_length)


def _expected_params(cfg) -> dict:
  """Counted from the architecture (§3), each option adding what it adds: the embedding
  tables (and learned positions), and the total."""
  h, d = cfg.num_heads, cfg.d_model
  attention = 2 * d * h * cfg.d_k + d * h * cfg.d_v + h * cfg.d_v * d
  if cfg.attention_bias:
    attention += 2 * h * cfg.d_k + h * cfg.d_v + d
  ffn = d * cfg.d_ff + cfg.d_ff + cfg.d_ff * d + d
  norm = 1 if cfg.norm_type == 'scale_norm' else 2 * d  # g, or LayerNorm's gain and bias
  layers = cfg.num_layers * ((attention + ffn + 2 * norm) + (2 * attention + ffn + 3 * norm))
  final_norms = 2 * norm if cfg.norm_position == 'pre' else 0
  tables = (1 if cfg.share_embeddings else 3) * cfg.vocab_size * d
  positions = 2 * cfg.max_len * d if cfg.position_encoding == 'learned' else 0
  return {'embedding': tables + positions, 'total': layers + final_norms + tables + positions}


@pytest.mark.parametrize('options', [
    dict(),
    dict(position_encoding='learned'),
    dict(attention_bias=True, share_embeddings=False),
    dict(norm_position='pre', norm_type='scale_norm'),
    dict(norm_position='pre', decoder_start='learned'),
])
def test_param_counts_equal_the_architecture_and_the_initialised_model(options):
  cfg = tiny_config(**options)
  counts = costs.param_counts(cfg)
  expected = _expected_params(cfg)
  assert counts['total'] == expected['total']
  assert counts['total'] == sum(x.size for x in jax.tree.leaves(init_params(cfg)))
  assert counts['embedding'] == expected['embedding']


def _summary(*args) -> subprocess.CompletedProcess:
  result = subprocess.run([sys.executable, '-m', 'transformer_jax.summary', *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
  return result


@pytest.mark.slow
def test_summary_json_for_a_table3_row():
  """Its parameters by hand, and what its run uses on 8 GPUs (`tests/test_platforms.py` checks
  the settings): its workdir at the end holds 2 checkpoints (the last, which Table 3 evaluates
  alone, and the one a damaged last falls back to) with Adam's two moments beside each."""
  result = _summary('--config=configs/table3.py:C2', '--json', '--platform=gpu', '--devices=8')
  assert result.returncode == 0, result.stderr
  summary = json.loads(result.stdout)
  n, d, d_ff, vocab = 4, 512, 2048, 37000
  layer = 4 * d * d + 2 * d * d_ff + d_ff + d
  want = n * (layer + 4 * d) + n * (layer + 4 * d * d + 6 * d) + vocab * d
  assert summary['params_total'] == want
  assert summary['params_embedding'] == vocab * d
  assert summary['params_non_embedding'] == want - vocab * d
  assert summary['flops_per_token'] > 2 * summary['params_non_embedding']
  assert (summary['dtype'], summary['steps_per_call']) == ('bfloat16', 20)
  assert summary['train_batch_shapes'] == [[25000 // 256 // 8 * 8, 256]]
  assert 0 <= summary['checkpoint_bytes'] - 2 * (4 * want + 2 * 4 * want) < 64
  assert summary['workdir_bytes'] == summary['checkpoint_bytes'] + summary['token_bytes']


@pytest.mark.slow
def test_summary_of_every_table3_row_applies_the_overrides_to_each():
  result = _summary('--config=configs/table3.py', '--all_rows', '--json',
                    '--config.data.vocab_size=32000')
  assert result.returncode == 0, result.stderr
  rows = json.loads(result.stdout)['rows']
  assert [r['row'] for r in rows] == list(table3.ROWS)
  assert {r['vocab_size'] for r in rows} == {32000}
  base_row = rows[0]
  assert base_row['params_embedding'] == 32000 * 512
  assert base_row['paper_params_millions'] == 65


@pytest.mark.parametrize('override, message', [
    ('--config.model.num_head=4', 'config.model.num_head does not exist'),
    ('--config.model.dropout_rate=1.5', 'config.model.dropout_rate must be in [0, 1)'),
])
@pytest.mark.slow
def test_summary_rejects_bad_overrides_naming_the_field(override, message):
  result = _summary('--config=configs/base.py', override)
  assert result.returncode != 0
  assert message in result.stderr
  assert 'Traceback' not in result.stderr


def test_benchmark_refuses_a_batch_smaller_than_its_data_shards():
  # 4 sequences cannot be split over the 8 test devices; rounding down would time an empty batch.
  with pytest.raises(ValueError, match='--batch_size .* at least 8 sequences'):
    benchmark.run(train_config(), batch_size=4, length=8, num_steps=1, warmup=1)


@pytest.mark.slow
def test_benchmark_times_packed_batches_k_steps_a_call_per_step(monkeypatch):
  # Two steps a call on packed sequences: the model FLOPs are one step's (3x the forward of 8
  # sequences of 8 + 8 tokens), and the figures are given per step: with every call (run for
  # real) timed at 1.0 s, a step takes 0.5 s. (The matmul peak is not measured.)
  monkeypatch.setattr(benchmark, 'matmul_peak', lambda dtype: 1e9)

  def one_second_a_call(fn, *_):
    jax.block_until_ready(fn())
    return 1.0

  monkeypatch.setattr(benchmark, '_pipelined_seconds', one_second_a_call)
  monkeypatch.setattr(benchmark, '_median_seconds', one_second_a_call)
  config = train_config(**{'train.steps_per_call': 2})
  result = benchmark.run(config, batch_size=8, length=8, num_steps=2, warmup=1, packed=True)
  assert result['steps_per_call'] == 2 and result['packed']
  model = model_config.from_config(config)
  flops = 3 * 8 * costs.forward_flops(model, 8, 8)
  assert result['model_flops_per_step'] == flops
  assert result['step_time_s'] == result['step_time_waited_s'] == 0.5
  assert result['target_tokens_per_s'] == pytest.approx(64 / 0.5)
  assert result['mfu'] == pytest.approx(flops / 0.5 / (1e9 * jax.device_count()))
