r"""Parameter counts and forward FLOPs of a config, or of every row of a sweep file, and what a
run of the config uses on a platform.

  python -m transformer_jax.summary --config=configs/table3.py:C2 [--json]
  python -m transformer_jax.summary --config=configs/base.py --platform=gpu [--devices=8] [--json]
  python -m transformer_jax.summary --config=configs/table3.py --all_rows \
      [--config.data.vocab_size=32000] [--json]

Nothing is allocated: shapes come from `jax.eval_shape`. For a config, the settings its run
resolves on `--platform` (cpu, gpu or tpu; default: this machine's), where every 'auto' becomes
the platform's default (`config.platforms`): the compute dtype, the dropout generator, the loss
chunk, the batch shapes, steps a compiled call, the evaluation and checkpoint schedule, and the
disk its workdir holds at the end of training (`training.footprint`). With `--all_rows` the config file
must be a sweep file (its `ROWS`, see `transformer_jax.sweep`): every row is counted with the
command line's `--config.*` overrides applied, beside the paper's figures where the file gives
them (`PAPER`: {row: (perplexity, BLEU)}, `PAPER_PARAMS`: {row: millions of parameters}).
"""

import json
import sys

from absl import flags
import jax
from ml_collections import config_flags

from transformer_jax import cli
from transformer_jax.config import fields, loading, platforms
from transformer_jax.model import costs, model_config
from transformer_jax.sweep import plan, results
from transformer_jax.training import footprint

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Config file, optionally with an argument: FILE.py:ARG.')
_JSON = flags.DEFINE_bool('json', False, 'Print one JSON object instead of text.')
_ALL_ROWS = flags.DEFINE_bool('all_rows', False, 'Summarise every row of the --config sweep file.')
_LENGTH = flags.DEFINE_integer(
    'length', 32, 'Source and target length at which FLOPs per target token are counted.')
_PLATFORM = flags.DEFINE_enum('platform', None, ['cpu', 'gpu', 'tpu'],  # platforms.PLATFORMS
                              "The platform whose defaults resolve the config's 'auto' fields "
                              "(default: this machine's).")
_DEVICES = flags.DEFINE_integer('devices', None, "Devices the batch is split over (default: "
                                "this machine's on its own platform, else 8).")

_PAPER_COUNT_NOTE = (
    'Counts use the configured vocabulary exactly, one shared embedding, biases and layer norms. '
    'The paper does not say how it counted; at vocab 37000 the d_model=512 rows come out about '
    '2M below its column, d_model=256 (C4) about 1M below, d_model=1024 (C5) about 4M below, '
    'and big about 1M above.')


def summarize(config, length: int) -> dict:
  """Parameter counts and forward FLOPs per target token of a validated `config`."""
  cfg = model_config.from_config(config)
  counts = costs.param_counts(cfg)
  return {
      'params_total': counts['total'],
      'params_embedding': counts['embedding'],
      'params_non_embedding': counts['non_embedding'],
      'flops_per_token': costs.flops_per_token(cfg, length),
      'flops_length': length,
  }


def sweep_rows(path: str, overrides: list[str], length: int) -> list[dict]:
  """Every row of the sweep file at `path`, with `FIELD=VALUE` overrides applied to each as the
  sweep applies them (`plan.row_config`)."""
  sweep = loading.load_sweep(path)
  paper_params = getattr(sweep, 'PAPER_PARAMS', {})
  rows = []
  for row in sweep.ROWS:
    config = plan.row_config(sweep, row, overrides)  # the row's config enters here
    rows.append({**results.shape_columns(row, config.model.to_dict(),
                                         config.train.label_smoothing,
                                         config.train.num_train_steps),
                 'vocab_size': config.data.vocab_size, **summarize(config, length),
                 'paper_params_millions': paper_params.get(row),
                 **results.paper_columns(sweep, row)})
  return rows


def _format_row(r: dict) -> str:
  paper = lambda name: '' if r[name] is None else r[name]
  return (f"{r['row']:<5}{r['N']:>3}{r['d_model']:>8}{r['d_ff']:>6}{r['h']:>4}{r['d_k']:>5}"
          f"{r['d_v']:>5}{r['P_drop']:>7}{r['eps_ls']:>7}{r['steps']:>7}"
          f"{r['params_total'] / 1e6:>10.1f}{paper('paper_params_millions'):>8}"
          f"{r['flops_per_token'] / 1e6:>10.1f}{paper('paper_ppl'):>7}{paper('paper_bleu'):>7}")


def main():
  if _ALL_ROWS.value:
    path = config_flags.get_config_filename(flags.FLAGS['config'])
    rows = sweep_rows(path, fields.command_line_overrides(sys.argv), _LENGTH.value)
    if _JSON.value:
      print(json.dumps({'rows': rows, 'note': _PAPER_COUNT_NOTE}))
      return
    print(f'{path}: vocabulary {rows[0]["vocab_size"]}; params in millions, '
          f'forward MFLOPs per target token at length {_LENGTH.value}.')
    print(f"{'row':<5}{'N':>3}{'d_model':>8}{'d_ff':>6}{'h':>4}{'d_k':>5}{'d_v':>5}"
          f"{'P_drop':>7}{'eps_ls':>7}{'steps':>7}{'params':>10}{'paper':>8}{'MFLOPs':>10}"
          f"{'PPL':>7}{'BLEU':>7}")
    for r in rows:
      print(_format_row(r))
    print(f'paper, PPL and BLEU: the paper\'s Table 3 (newstest2013). {_PAPER_COUNT_NOTE}')
    return
  summary = summarize(_CONFIG.value, _LENGTH.value)
  here = platforms.current()
  platform = _PLATFORM.value or here
  devices = _DEVICES.value or (jax.device_count() if platform == here else 8)
  summary.update(footprint.settings(_CONFIG.value, platform, devices))
  if _JSON.value:
    print(json.dumps(summary))
    return
  print(f'parameters      total {summary["params_total"]:,}  '
        f'embedding {summary["params_embedding"]:,}  '
        f'non-embedding {summary["params_non_embedding"]:,}')
  print(f'forward FLOPs   {summary["flops_per_token"]:.4g} per target token '
        f'(source and target length {_LENGTH.value})')
  print(_settings_text(summary))


def _settings_text(s: dict) -> str:
  """`footprint.settings` as lines of text."""
  shapes = lambda key: ', '.join(f'{rows} x {length}' for rows, length in s[key])
  gigabytes = lambda key: f'{s[key] / 1e9:.2f} GB'
  return '\n'.join([
      f"on {s['platform']}, {s['devices']} device(s):",
      f"  compute         {s['dtype']}; dropout masks {s['dropout_prng_impl']}; "
      f"loss chunk {s['loss_chunk'] or 'off'}",
      f"  training        batches {shapes('train_batch_shapes')}"
      f"{' (packed)' if s['packed'] else ''}; {s['steps_per_call']} step(s) a call",
      f"  evaluation      loss every {s['eval_every_steps']} steps"
      + (f"; BLEU (beam {s['beam_size']}) every {s['bleu_every_steps']} and at the last"
         if s['bleu_every_steps'] else '') + f"; batches {shapes('eval_batch_shapes')}",
      f"  checkpoints     every {s['checkpoint_every_steps']} steps; at the end "
      f"{s['checkpoints_kept']} kept, {s['checkpoints_whole']} of them whole",
      f"  workdir         {gigabytes('workdir_bytes')} at the end of training "
      f"(checkpoints {gigabytes('checkpoint_bytes')}, token ids {gigabytes('token_bytes')})"])


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  cli.run(main)
