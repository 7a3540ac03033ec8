r"""Parameter counts and forward FLOPs of a config, or of every Table 3 row.

  python -m transformer_jax.summary --config=configs/table3.py:C2 [--json]
  python -m transformer_jax.summary --table3 [--config.data.vocab_size=32000] [--json]

Nothing is allocated: shapes come from `jax.eval_shape`. With `--table3` every row of
`configs/table3.py` is counted with the command line's `--config.*` overrides applied, beside
the paper's params column.
"""

import json

from absl import app, flags
from ml_collections import config_flags

from transformer_jax import config_lib, costs

_CONFIG = config_flags.DEFINE_config_file(
    'config', 'configs/base.py', 'Config file, optionally with an argument: file.py:arg.')
_JSON = flags.DEFINE_bool('json', False, 'Print one JSON object instead of text.')
_TABLE3 = flags.DEFINE_bool('table3', False, 'Summarise every row of configs/table3.py.')
_LENGTH = flags.DEFINE_integer(
    'length', 32, 'Source and target length at which FLOPs per target token are counted.')

_PAPER_COUNT_NOTE = (
    'Counts use the configured vocabulary exactly, one shared embedding, biases and layer norms. '
    'The paper does not say how it counted; at vocab 37000 the d_model=512 rows come out about '
    '2M below its column, d_model=256 about 1M below and d_model=1024 about 4M below.')


def summarize(config, length: int) -> dict:
  cfg = config_lib.model_config(config)
  counts = costs.param_counts(cfg)
  return {
      'params_total': counts['total'],
      'params_embedding': counts['embedding'],
      'params_non_embedding': counts['non_embedding'],
      'flops_per_token': costs.flops_per_token(cfg, length),
      'flops_length': length,
  }


def table3_rows(overrides: dict, length: int) -> list[dict]:
  try:
    from configs import table3  # pylint: disable=import-outside-toplevel
  except ModuleNotFoundError as e:
    raise app.UsageError('--table3 reads configs/table3.py: run from the repository root') from e
  rows = []
  for row_id, row in table3.ROWS.items():
    config = table3.get_config(row_id)
    config.update_from_flattened_dict(overrides)
    m = config.model
    rows.append({
        'row': row_id, 'N': m.num_layers, 'd_model': m.d_model, 'd_ff': m.d_ff,
        'h': m.num_heads, 'd_k': m.d_k, 'd_v': m.d_v, 'P_drop': m.dropout_rate,
        'eps_ls': config.train.label_smoothing, 'steps': config.train.num_train_steps,
        'positions': m.position_encoding, 'vocab_size': config.data.vocab_size,
        **summarize(config, length),
        'paper_params_millions': row.params_millions, 'paper_ppl': row.ppl,
        'paper_bleu': row.bleu,
    })
  return rows


def _format_row(r: dict) -> str:
  return (f"{r['row']:<5}{r['N']:>3}{r['d_model']:>8}{r['d_ff']:>6}{r['h']:>4}{r['d_k']:>5}"
          f"{r['d_v']:>5}{r['P_drop']:>7}{r['eps_ls']:>7}{r['steps'] // 1000:>6}K"
          f"{r['params_total'] / 1e6:>10.1f}{r['paper_params_millions']:>8}"
          f"{r['flops_per_token'] / 1e6:>10.1f}{r['paper_ppl']:>7}{r['paper_bleu']:>7}")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _TABLE3.value:
    rows = table3_rows(config_flags.get_override_values(flags.FLAGS['config']), _LENGTH.value)
    if _JSON.value:
      print(json.dumps({'rows': rows, 'note': _PAPER_COUNT_NOTE}))
      return
    print(f'Table 3 rows, vocabulary {rows[0]["vocab_size"]}; params in millions, '
          f'forward MFLOPs per target token at length {_LENGTH.value}.')
    print(f"{'row':<5}{'N':>3}{'d_model':>8}{'d_ff':>6}{'h':>4}{'d_k':>5}{'d_v':>5}"
          f"{'P_drop':>7}{'eps_ls':>7}{'steps':>7}{'params':>10}{'paper':>8}{'MFLOPs':>10}"
          f"{'PPL':>7}{'BLEU':>7}")
    for r in rows:
      print(_format_row(r))
    print(f'PPL and BLEU are the paper\'s (newstest2013). {_PAPER_COUNT_NOTE}')
    return
  summary = summarize(_CONFIG.value, _LENGTH.value)
  if _JSON.value:
    print(json.dumps(summary))
    return
  print(f'parameters      total {summary["params_total"]:,}  '
        f'embedding {summary["params_embedding"]:,}  '
        f'non-embedding {summary["params_non_embedding"]:,}')
  print(f'forward FLOPs   {summary["flops_per_token"]:.4g} per target token '
        f'(source and target length {_LENGTH.value})')


if __name__ == '__main__':
  app.run(main, flags_parser=config_lib.parse_flags)
