r"""The results tables of README.md, docs/performance.md and the experiments' pages, written from
the committed result files.

  python experiments/tables.py

A page holds each table between `<!-- tables.py: NAME -->` and `<!-- /tables.py -->`; this
rewrites what lies between from the JSON and JSONL files that the measuring scripts wrote under
experiments/, and computes here what a table shows but no file holds (a mean over seeds, a range
over CPU types, a ratio, hours). Every row names the command that measured it and links its
files. After committing a new result file, run this and commit the pages it changed with it;
tests/test_pages.py regenerates every table and fails where a committed page differs.
"""

import glob
import json
import os
import re
import statistics
from typing import Callable

from absl import app

from transformer_jax.config import loading
from transformer_jax.storage import provenance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A generated table in its page: the opening marker names it, the closing one ends it.
MARKER = re.compile(r'(<!-- tables\.py: ([\w-]+) -->\n)(.*?)(<!-- /tables\.py -->)', re.S)

_M30K_SEEDS = [f'experiments/multi30k/postnorm_lowercase_zero_start_12k{seed}_test.json'
               for seed in ('', '_seed1', '_seed2', '_seed3')]  # seeds 0-3, as `evaluate` wrote
_TABLE3 = 'experiments/table3_multi30k'
_TINY_RUNS = 'experiments/quickstart/variation'  # one JSON per CPU type
_TINY_TIMES = 'experiments/speed/compile_time_tiny_intel_xeon_avx512.json'
_M30K_TIMES = 'experiments/speed/compile_time_multi30k_intel_xeon_avx512.json'
_H200_STEPS = 'experiments/gpu/h200/fused_loss/benchmarks.jsonl'
_OVERLAP = 'experiments/side_by_side/overlap_cpu.json'
_VS_CT2 = 'experiments/decoding_vs_ct2'
# Its files, a lever at a time, in the order they came, then the code now on a larger model.
_VS_CT2_FILES = [f'{_VS_CT2}/amd_epyc_{name}.json' for name in (
    'before_levers', 'levers', 'padding_rows', 'drop_finished', 'top_k_blocks',
    'batches_at_once', 'batches_by_length', 'multi30k_vocab6000', 'multi30k_3000steps',
    'multi30k_one_loop', 'one_loop', 'multi30k_narrowed', 'narrowed', 'multi30k_alone', 'alone',
    'multi30k_top_k_gather', 'top_k_gather')]
_VS_CT2_NOW = f'{_VS_CT2}/amd_epyc_multi30k_top_k_gather.json'  # the code now, Multi30k's model
# The files of experiments/decoding_vs_ct2/evaluation_time.py: with finished sentences dropped
# (ed30a05), with them kept (b64a086), one loop a search (0b9cbb1), a quarter of every batch
# (2186d08), of batches of 64 only (680f614), and beam search's top 2k by index (the code now).
_EVALUATION_TIME = [f'{_VS_CT2}/amd_epyc_evaluation_time_dropped.json',
                    f'{_VS_CT2}/amd_epyc_evaluation_time.json',
                    f'{_VS_CT2}/amd_epyc_evaluation_time_one_loop.json',
                    f'{_VS_CT2}/amd_epyc_evaluation_time_narrowed_small_batches.json',
                    f'{_VS_CT2}/amd_epyc_evaluation_time_narrowed.json',
                    f'{_VS_CT2}/amd_epyc_evaluation_time_top_k_gather.json']
_OVERLAP_BEFORE = 'experiments/side_by_side/overlap_cpu_before_547470b.json'
_H200_PRNG = 'experiments/gpu/h200/prng'
_H200_LOOP = 'experiments/gpu/h200/window_2026-11-28.jsonl'
_H200_E2E = 'experiments/gpu/h200/window_2026-11-28b.jsonl'
_H200_DECODING = 'experiments/gpu/h200/decode_speed.json'
_H100 = 'experiments/gpu/h100/window_2026-11-27.jsonl'
_TORCH_CPUS = 'experiments/speed/torch_baseline'  # one JSON per CPU type
_HF_EXPORT = 'experiments/hf_export'  # one JSON per CPU type, of a run trained on that CPU
_LOSS_CHUNK = 'experiments/speed/loss_chunk_intel_xeon_avx512.jsonl'
_PACKING = 'experiments/speed/packing_intel_xeon_avx512.json'
_TOGETHER = ('experiments/speed/together_cpu.json',
             'experiments/speed/together_intel_xeon_avx512.json')
# The loop against the benchmark, by CPU type: {K: the file that gives it}.
_LOOP = (
    {1: 'experiments/speed/loop_cpu.json', 8: 'experiments/speed/loop_k8_cpu.json'},
    {1: 'experiments/speed/loop_intel_xeon_avx512.json',
     8: 'experiments/speed/loop_intel_xeon_avx512.json'},
)
_BENCHMARK = ('python -m transformer_jax.benchmark --config=configs/base.py '
              '--config.dtype=bfloat16 --config.train.loss_chunk=16')


# Reading the result files.

def load(path: str):
  """A result file by its path under experiments/: a JSON file's value, a JSONL file's records."""
  assert path.startswith('experiments/') and path.endswith(('.json', '.jsonl')), path
  with open(os.path.join(REPO, path), encoding='utf-8') as f:
    if path.endswith('.jsonl'):
      return [json.loads(line) for line in f if line.strip()]
    return json.load(f)


def record(path: str, **fields) -> dict:
  """The one record of a JSONL file whose `fields` have these values."""
  [found] = [r for r in load(path) if all(r.get(k) == v for k, v in fields.items())]
  return found


def cpu_type(result: dict) -> str:
  """The CPU a result records, as the pages name it ('AMD EPYC', 'Intel Xeon (AVX-512)')."""
  return provenance.cpu_type(result.get('provenance', {}).get('machine') or result['machine'])


def each_cpu(folder: str) -> list[tuple[str, dict]]:
  """(file, its result) of a folder that holds one JSON per CPU type, in name order."""
  return [(os.path.relpath(path, REPO), load(os.path.relpath(path, REPO)))
          for path in sorted(glob.glob(os.path.join(REPO, folder, '*.json')))]


def table3() -> tuple[dict, list]:
  """The miniature Table 3 as experiments/table3_multi30k/trends.py reads the sweep's row
  files: ({row: {'ppl': [...], 'bleu': [...]}}, [(trend, True / False / None)])."""
  trends = loading.import_sibling(__file__, 'table3_multi30k/trends')
  rows = trends.load(os.path.join(REPO, _TABLE3, 'rows'))
  return rows, trends.trends(rows)


def h200_step(name: str) -> dict:
  """One benchmark of `_H200_STEPS` ('base_bf16_chunk16': base, bfloat16, loss_chunk 16)."""
  return record(_H200_STEPS, name=name)['result']


def h100_against_torch(model: str) -> dict:
  """The H100 window's PyTorch part for `model` ('base', 'big'), bfloat16."""
  return record(_H100, part=f'torch_{model}_bfloat16')['result']['shapes'][f'configs/{model}.py']


# Printing.

def span(values: list[float], digits: int, unit: str = '') -> str:
  """'1.17–1.22×' over several values, '1.22×' where they agree at that precision."""
  low, high = f'{min(values):.{digits}f}', f'{max(values):.{digits}f}'
  return f'{low}{unit}' if low == high else f'{low}–{high}{unit}'


def link(page: str, path: str, label: str | None = None) -> str:
  """A Markdown link from `page` to a repository file or folder, labelled with its name."""
  target = os.path.relpath(os.path.join(REPO, path), os.path.join(REPO, os.path.dirname(page)))
  folder = os.path.isdir(os.path.join(REPO, path))
  name = label or os.path.basename(path) + ('/' if folder else '')
  return f'[{name}]({target}{"/" if folder else ""})'


def links(page: str, *paths: str) -> str:
  return ', '.join(link(page, path) for path in paths)


def ms(seconds: float) -> str:
  return f'{1000 * seconds:.1f} ms'


def markdown(header: list[str], rows: list[list[str]]) -> str:
  lines = [header, ['---'] * len(header), *rows]
  return ''.join(f'| {" | ".join(cells)} |\n' for cells in lines)


# The README's results: what a user chooses by.

def results(page: str) -> str:
  bleu = [load(path)['bleu_tokenized_lowercase_unsplit'] for path in _M30K_SEEDS]
  rows, trends = table3()
  tiny = [next(r for r in result['runs'] if r['setting'] == 'this CPU')
          for _, result in each_cpu(_TINY_RUNS)]
  [tiny_steps] = {run['step'] for run in tiny}
  tiny_times = load(_TINY_TIMES)['means']
  base, big = h200_step('base_bf16_chunk16'), h200_step('big_bf16_chunk16')
  torch_base, torch_big = h100_against_torch('base'), h100_against_torch('big')
  torch_cpus = [result['shapes'][shape]['speedup_over_torch']
                for _, result in each_cpu(_TORCH_CPUS) for shape in ('tiny', 'base')]
  e2e = record(_H200_E2E, part='multi30k_e2e')
  decoding = load(_H200_DECODING)
  exports = [result['results'] for _, result in each_cpu(_HF_EXPORT)]
  greedy, beam = [r[0] for r in exports], [r[1] for r in exports]
  seeds = ' '.join(str(n) for n in range(len(_M30K_SEEDS)))
  return markdown(['result', 'figure', 'command', 'files'], [
      [f'Multi30k EN→DE test2016, `configs/multi30k.py` (the published baseline\'s size, '
       f'published: 41.0), {len(bleu)} seeds',
       f'BLEU {statistics.mean(bleu):.2f} (seeds {span(bleu, 2)}), lowercased, tokenized',
       f'`for N in {seeds}; do python -m transformer_jax.train --config=configs/multi30k.py '
       f'--workdir=/tmp/m30k_$N --config.seed=$N && python -m transformer_jax.evaluate '
       f'--workdir=/tmp/m30k_$N --split=test; done`',
       ', '.join(link(page, path, f'seed {n}') for n, path in enumerate(_M30K_SEEDS))],
      ['Table 3 in miniature (N 3, d_model 128) on Multi30k, every row with two or more seeds',
       f'{sum(ok is True for _, ok in trends)} of the paper\'s {len(trends)} trends beyond the '
       f'seed spread; base {statistics.mean(rows["base"]["bleu"]):.2f} dev BLEU '
       f'({len(rows["base"]["bleu"])} seeds\' mean)',
       f'`python -m transformer_jax.sweep --sweep={_TABLE3}/sweep.py --workdir=/tmp/table3 '
       f'--results=/tmp/table3/rows && python {_TABLE3}/trends.py --results=/tmp/table3/rows`',
       links(page, f'{_TABLE3}/trends.md', f'{_TABLE3}/rows')],
      ['The quick start: `configs/tiny.py` on its built-in corpus, a 2-core CPU',
       f'dev BLEU {span([run["dev_bleu"] for run in tiny], 1)} at step {tiny_steps} '
       f'({len(tiny)} CPU types); {tiny_times["cache, cold"]["seconds_to_end"]:.0f} s from '
       f'scratch, {tiny_times["cache, warm"]["seconds_to_end"]:.0f} s with the compilation '
       f'cache warm',
       '`python -m transformer_jax.train --config=configs/tiny.py --workdir=/tmp/tiny`',
       links(page, _TINY_RUNS, _TINY_TIMES)],
      ['Training speed, one NVIDIA H200: the paper\'s batch (25k + 25k tokens), bfloat16',
       f'base {ms(base["step_time_s"])} a step, {100 * base["mfu"]:.0f}% MFU (100k steps: '
       f'{base["step_time_s"] * 100_000 / 3600:.1f} h); big {ms(big["step_time_s"])}, '
       f'{100 * big["mfu"]:.0f}% (300k steps: {big["step_time_s"] * 300_000 / 3600:.1f} h)',
       f'`{_BENCHMARK}` (and `configs/big.py`)', link(page, _H200_STEPS)],
      ['Against PyTorch\'s `nn.Transformer`, the same step: one NVIDIA H100 (bfloat16), '
       '2-core CPUs (float32, eager)',
       f'H100: base {torch_base["speedup_over_torch_compiled"]:.2f}× `torch.compile`\'s target '
       f'tokens/s ({torch_base["speedup_over_torch"]:.2f}× eager), big '
       f'{torch_big["speedup_over_torch_compiled"]:.2f}× '
       f'({torch_big["speedup_over_torch"]:.2f}×); CPUs: {span(torch_cpus, 2, "×")} eager',
       '`python experiments/speed/torch_baseline.py --shapes=configs/base.py --dtype=bfloat16 '
       '--compile`', links(page, _H100, _TORCH_CPUS)],
      ['`configs/multi30k.py` end to end on one NVIDIA H200: data, '
       f'{e2e["result"]["dev"]["step"]} steps, test2016 with beam '
       f'{e2e["result"]["test"]["beam_size"]}',
       f'{e2e["seconds"]:.0f} s from a fresh workdir; test BLEU '
       f'{e2e["result"]["test"]["bleu_detokenized"]:.2f} (lowercased)',
       '`python experiments/gpu/accelerator_multi30k.py --output=/tmp/m30k_e2e`',
       link(page, _H200_E2E)],
      [f'Beam search (beam {decoding["beam_size"]}) with the key/value cache, test2016, one '
       'NVIDIA H200',
       f'{decoding["cached"]["sentences_per_second"]:.0f} sentences/s',
       f'`python experiments/decoding/decode_speed.py --workdir=DIR --split=test '
       f'--beam_size={decoding["beam_size"]} --batch_size={decoding["batch_size"]} '
       '--nouncached`', link(page, _H200_DECODING)],
      ['A trained model exported to Hugging Face transformers, test2016, 2-core CPUs',
       f'identical translations: greedy {span([r["same_translations"] for r in greedy], 0)}, '
       f'beam {beam[0]["beam_size"]} {span([r["same_translations"] for r in beam], 0)} of '
       f'{load(each_cpu(_HF_EXPORT)[0][0])["sentences"]}; ours '
       f'{span([r["speed_ratio"] for r in greedy + beam], 2, "×")} `generate`\'s sentences/s',
       '`python experiments/hf_export/check.py --workdir=DIR --output=FILE`',
       link(page, _HF_EXPORT)],
      against_ct2(page),
  ])


# docs/performance.md: what the options gain, where they were measured.

def gpu_step(page: str) -> str:
  """The paper's step on one H200, by model and dtype, with the loss fused and without."""
  rows = []
  for model, dtype in (('base', 'bf16'), ('base', 'f32'), ('big', 'bf16')):
    whole, fused = h200_step(f'{model}_{dtype}'), h200_step(f'{model}_{dtype}_chunk16')
    rows.append([f'{model}, {fused["dtype"]}', ms(whole['step_time_s']),
                 ms(fused['step_time_s']), f'{fused["target_tokens_per_s"]:.0f}',
                 f'{100 * fused["mfu"]:.1f}%',
                 f'{fused["matmul_peak_gflops_per_s"] / 1000:.0f} TFLOP/s'])
  return markdown(['model, dtype', 'step, `loss_chunk` 0', 'step, `loss_chunk` 16',
                   'target tokens/s (16)', 'MFU (16)', 'measured peak (16)'], rows)


def against_pytorch(page: str) -> str:
  """The same training step in PyTorch: one H100 in bfloat16, and 2-core CPUs in float32."""
  rows = []
  for model in ('base', 'big'):
    shape = h100_against_torch(model)
    rows.append([f'one {shape["device"]}', f'{model}, bfloat16',
                 f'{ms(shape["jax_step_time_s"])}, MFU {100 * shape["jax_mfu"]:.1f}%',
                 f'{shape["speedup_over_torch"]:.2f}×',
                 f'{shape["speedup_over_torch_compiled"]:.2f}×', link(page, _H100)])
  cpus = each_cpu(_TORCH_CPUS)
  for shape in ('tiny', 'base'):
    mfu = [100 * result['shapes'][shape]['jax_mfu'] for _, result in cpus]
    rows.append([f'2-core CPUs ({len(cpus)} types)',
                 f'{shape} (`experiments/speed/shapes.py`), float32',
                 f'MFU {span(mfu, 0, "%")}',
                 span([result['shapes'][shape]['speedup_over_torch'] for _, result in cpus], 2,
                      '×'), 'not timed', link(page, _TORCH_CPUS)])
  return markdown(['machine', 'model', 'ours', 'over PyTorch eager', 'over `torch.compile`',
                   'files'], rows)


def options(page: str) -> str:
  """Each performance option against its default, on the machine it was measured on."""
  f32, bf16 = h200_step('base_f32_chunk16'), h200_step('base_bf16_chunk16')
  whole = h200_step('base_bf16')
  chunks = {n: statistics.median(r['step_time_s'] for r in load(_LOSS_CHUNK)
                                 if r['loss_chunk'] == n) for n in (0, 2)}
  packing = load(_PACKING)['runs']
  loop = record(_H200_LOOP, part='loop_speed')['result']['steps_per_second_median']
  cache = {config: load(path)['means'] for config, path in (('tiny', _TINY_TIMES),
                                                            ('multi30k', _M30K_TIMES))}
  together = [load(path)['together_over_apart']['wall'] for path in _TOGETHER]
  prng = {impl: load(f'{_H200_PRNG}/base_bf16_{impl}.json')['step_time_s']
          for impl in ('threefry', 'rbg')}
  cpu = f'a 2-core {cpu_type(load(_PACKING))}'
  h200 = 'one NVIDIA H200'
  return markdown(['option', 'measured, against its default', 'on', 'command', 'files'], [
      ['`dtype` \'bfloat16\'',
       f'base: {ms(f32["step_time_s"])} a step in float32 (TF32) → {ms(bf16["step_time_s"])}',
       h200, f'`{_BENCHMARK}`', link(page, _H200_STEPS)],
      ['`train.loss_chunk` 16',
       f'base in bfloat16: {ms(whole["step_time_s"])} a step with 0 → '
       f'{ms(bf16["step_time_s"])}', h200, f'`{_BENCHMARK}`', link(page, _H200_STEPS)],
      ['`train.loss_chunk` 2',
       f'`configs/multi30k.py`: {ms(chunks[0])} a step with 0 → {ms(chunks[2])} (medians of '
       f'{len(load(_LOSS_CHUNK)) // 2} rounds)', cpu,
       '`python -m transformer_jax.benchmark --config=configs/multi30k.py --length=32 '
       '--steps=10 --config.train.loss_chunk=2`', link(page, _LOSS_CHUNK)],
      ['`data.pack_length` 32, 64',
       f'`configs/multi30k.py`, real target tokens/s over fine buckets: '
       f'{packing["32"]["ratio"]:.2f}× (32), {packing["64"]["ratio"]:.2f}× (64)', cpu,
       '`python experiments/speed/packing.py --pack_lengths=0,32,64 --rounds=1`',
       link(page, _PACKING)],
      ['`train.steps_per_call` 8, 32',
       f'`configs/multi30k.py` packed, the loop\'s steps/s: {loop["loop K=1"]:.1f} at 1 → '
       f'{loop["loop K=8"]:.1f} (8), {loop["loop K=32"]:.1f} (32)', h200,
       '`python experiments/speed/loop.py --ks=1,8,32 --steps=1024`', link(page, _H200_LOOP)],
      ['`train.compilation_cache_dir` (on)',
       f'a run again, against its first with the cache empty: `configs/tiny.py` '
       f'{cache["tiny"]["cache, cold"]["seconds_to_end"]:.0f} → '
       f'{cache["tiny"]["cache, warm"]["seconds_to_end"]:.0f} s, `configs/multi30k.py` 200 '
       f'steps {cache["multi30k"]["cache, cold"]["seconds_to_end"]:.0f} → '
       f'{cache["multi30k"]["cache, warm"]["seconds_to_end"]:.0f} s', cpu,
       '`python experiments/speed/compile_time.py --config=configs/tiny.py`',
       links(page, _TINY_TIMES, _M30K_TIMES)],
      ['`sweep --together=4`',
       f'four Table 3 rows as one program, against one after another: rows per hour '
       f'{span(together, 2, "×")}', f'2-core CPUs ({len(together)} types)',
       '`python experiments/speed/together.py --steps=100`', links(page, *_TOGETHER)],
      ['`train.dropout_prng_impl` \'rbg\'',
       f'base in bfloat16 with flax\'s dropout: {ms(prng["threefry"])} a step with threefry → '
       f'{ms(prng["rbg"])}', h200,
       'the benchmark under `JAX_DEFAULT_PRNG_IMPL=rbg`, on the code of the time',
       link(page, _H200_PRNG)],
  ])


def loop(page: str) -> str:
  """The training loop's steps/s against the benchmark's at the same packed shape."""
  h200 = record(_H200_LOOP, part='loop_speed')['result']
  rows = [['one NVIDIA H200', str(k), f'{h200["steps_per_second_median"][f"loop K={k}"]:.1f}',
           f'{h200["steps_per_second_median"][f"benchmark K={k}"]:.1f}',
           f'{h200["loop_over_benchmark"][f"K={k}"]:.2f}', link(page, _H200_LOOP)]
          for k in (1, 8, 32)]
  for k in (1, 8):
    ratios = [load(files[k])['loop_over_benchmark'][f'K={k}'] for files in _LOOP]
    rows.append([f'2-core CPUs ({len(_LOOP)} types)', str(k), '–', '–', span(ratios, 2),
                 links(page, *sorted({files[k] for files in _LOOP}))])
  return markdown(['machine', '`train.steps_per_call`', 'loop, steps/s', 'benchmark, steps/s',
                   'loop / benchmark', 'files'], rows)


def decoding(page: str) -> str:
  """Beam search on one H200, and the exported model beside transformers and CTranslate2."""
  h200 = load(_H200_DECODING)
  rows = [[f'ours, beam {h200["beam_size"]}, batch {h200["batch_size"]}', 'one NVIDIA H200',
           f'{h200["cached"]["sentences_per_second"]:.0f} sentences/s, '
           f'{h200["cached"]["output_tokens_per_second"]:.0f} output tokens/s',
           link(page, _H200_DECODING)]]
  exports = each_cpu(_HF_EXPORT)
  for i in (0, 1):
    found = [result['results'][i] for _, result in exports]
    rows.append([f'ours against transformers\' `generate`, beam {found[0]["beam_size"]}',
                 f'2-core CPUs ({len(found)} types)',
                 f'{span([r["speed_ratio"] for r in found], 2, "×")} the sentences/s; '
                 f'{span([r["same_translations"] for r in found], 0)} of '
                 f'{exports[0][1]["sentences"]} translations identical',
                 link(page, _HF_EXPORT)])
  ct2 = against_ct2(page)
  rows.append(['ours against CTranslate2, the same model, inputs, batches and cores',
               'a 2-core AMD EPYC', ct2[1], ct2[3]])
  return markdown(['decoding', 'on', 'measured', 'files'], rows)


def against_ct2(page: str) -> list[str]:
  """The fair benchmark against CTranslate2, the code now: a row of README.md's results."""
  result = load(_VS_CT2_NOW)
  ratio = {(run['beam_size'], run['threads']): run['ours_over_ct2'] for run in result['results']}
  same = [run['translations']['same_translations'] for run in result['results']]
  work = {run['beam_size']: run['ours']['row_steps'] / run['ct2']['fewest_row_steps']
          for run in result['results']}
  dropped = {run['beam_size']: dropped_as_done(run) for run in result['results']
             if run['threads'] == 1}
  steps = result['checkpoint_steps'][-1]
  return [
      f'Decoding against CTranslate2 (float32): the same exported `configs/multi30k.py` model '
      f'({steps} steps), test2016, batches and cores, 2-core AMD EPYC',
      f'ours / CTranslate2 sentences/s: greedy {ratio[1, 1]:.2f} (one thread), '
      f'{ratio[1, 2]:.2f} (two); beam 4 {ratio[4, 1]:.2f}, {ratio[4, 2]:.2f}; '
      f'{span(same, 0)} of {result["sentences"]} translations identical; ours computes '
      f'{work[1]:.2f}× (greedy) and {work[4]:.2f}× (beam 4) the fewest row-steps '
      'CTranslate2\'s outputs need; each sentence dropped the step it is done, at most '
      f'{dropped[1]:.2f} and {dropped[4]:.2f} on one thread',
      '`python -m transformer_jax.train --config=configs/multi30k.py --workdir=/tmp/m30k '
      f'--config.train.num_train_steps={steps} --config.train.eval_every_steps={steps} && '
      f'python {_VS_CT2}/benchmark.py --workdir=/tmp/m30k`',
      link(page, _VS_CT2_NOW)]


# The experiments' pages: the same measurements, CPU type by CPU type.

def cpu_torch(page: str) -> str:
  rows = [[cpu_type(result) if shape == 'tiny' else '', shape,
           f'{figures["torch_target_tokens_per_s"]:.0f}',
           f'{figures["jax_target_tokens_per_s"]:.0f}', f'{figures["speedup_over_torch"]:.2f}×',
           f'{100 * figures["jax_mfu"]:.1f}%', result['provenance']['packages']['torch'],
           link(page, path) if shape == 'tiny' else '']
          for path, result in each_cpu(_TORCH_CPUS)
          for shape, figures in result['shapes'].items()]
  return markdown(['CPU', 'shape', 'PyTorch target tok/s', 'ours', 'speed-up', 'our MFU',
                   'PyTorch', 'file'], rows)


def cpu_loss_chunk(page: str) -> str:
  rows = []
  for chunk in (0, 2):
    times = [r['step_time_s'] for r in load(_LOSS_CHUNK) if r['loss_chunk'] == chunk]
    rows.append([str(chunk), *(ms(t) for t in times), ms(statistics.median(times))])
  return markdown(['`train.loss_chunk`', 'round 1', 'round 2', 'round 3', 'median'], rows)


def cpu_packing(page: str) -> str:
  runs = load(_PACKING)['runs']
  return markdown(['`data.pack_length`', 'real target tokens/s', 'ratio'], [
      [length, f'{run["mean"]:.0f}', f'{run["ratio"]:.2f}'] for length, run in runs.items()])


def cpu_compile(page: str) -> str:
  tiny, multi30k = load(_TINY_TIMES)['runs'], load(_M30K_TIMES)['runs']

  def cell(runs: list[dict]) -> str:
    ends = ' / '.join(f'{run["seconds_to_end"]:.1f}' for run in runs)
    compiling = ' / '.join(f'{run["compile_seconds"]:.1f}' for run in runs)
    return f'{ends} s to the end; compiling {compiling} s'

  return markdown(['run', 'programs compiled', '`configs/tiny.py` (2 rounds)',
                   '`configs/multi30k.py`, 200 steps'], [
      [run, f'{tiny[run][0]["compiled"]}, {multi30k[run][0]["compiled"]}', cell(tiny[run]),
       cell(multi30k[run])] for run in ('cache, cold', 'cache, warm')])


def cpu_together(page: str) -> str:
  rows = []
  for path in _TOGETHER:
    result = load(path)
    for variant, name in (('apart', 'one after another'), ('together', 'as one program')):
      ratio = result['together_over_apart']
      rows.append([cpu_type(result) if variant == 'apart' else '', name,
                   f'{result[variant]["wall_seconds"]:.1f} s',
                   f'{result["rows_per_hour"][variant]:.1f}' + (
                       f', {ratio["wall"]:.2f}×' if variant == 'together' else ''),
                   f'{result[variant]["step_seconds"]:.1f} s' + (
                       f', {ratio["steps"]:.2f}×' if variant == 'together' else ''),
                   link(page, path) if variant == 'apart' else ''])
  return markdown(['CPU', 'the rows', '4 rows, wall time', 'rows per hour', 'the steps\' time',
                   'file'], rows)


def cpu_loop(page: str) -> str:
  rows = []
  for files in _LOOP:
    for k, path in files.items():
      result = load(path)
      median = result['steps_per_second_median']
      rows.append([cpu_type(result), str(k), f'{median[f"loop K={k}"]:.3f}',
                   f'{median[f"benchmark K={k}"]:.3f}',
                   f'{result["loop_over_benchmark"][f"K={k}"]:.2f}',
                   str(len(result['steps_per_second_rounds'])), link(page, path)])
  return markdown(['CPU', '`train.steps_per_call`', 'loop, steps/s', 'benchmark, steps/s',
                   'loop / benchmark', 'rounds', 'file'], rows)


def side_by_side_overlap(page: str) -> str:
  rows = []
  for path, name in ((_OVERLAP_BEFORE, 'one compile thread (547470b)'),
                     (_OVERLAP, 'a compile thread a slot')):
    result = load(path)
    rows.append([name, ', '.join(f'{start:.1f}' for start, _ in result['spans']),
                 ', '.join(f'{share:.2f}' for share in result['share_overlapped']),
                 f'{max(end for _, end in result["spans"]):.1f} s', link(page, path)])
  return markdown(['', 'the four groups\' training starts (s from the sweep\'s start)',
                   'share of each group\'s span another overlapped', 'last group ends', 'file'],
                  rows)


def decoding_vs_ct2(page: str) -> str:
  rows = []
  for path in _VS_CT2_FILES:
    result = load(path)
    for run in result['results']:
      same = run['translations']
      rows.append([f'{result["code"]} ({result["provenance"]["commit"][:7]})',
                   cpu_type(result), str(run['beam_size']), str(run['threads']),
                   f'{run["ours"]["sentences_per_second"]:.0f}',
                   f'{run["ct2"]["sentences_per_second"]:.0f}', f'{run["ours_over_ct2"]:.2f}',
                   f'{same["same_translations"]} of {same["sentences"]}', link(page, path)])
  return markdown(['our code', 'CPU', 'beam', 'threads', 'ours, sentences/s',
                   'CTranslate2, sentences/s', 'ours / CTranslate2', 'same translations',
                   'file'], rows)


def dropped_as_done(run: dict) -> float:
  """Ours / CTranslate2 in sentences/s had our search of `run` computed only the row-steps of
  each sentence searched alone (dropped the step its own stop rule ends it), at the speed a
  row-step it measured: the most that dropping sentences can gain without changing the rule."""
  return run['ours_over_ct2'] * run['ours']['row_steps'] / run['ours']['row_steps_alone']


def decoding_work(page: str) -> str:
  """The row-steps a sentence each side's search computes, from the files that count ours."""
  rows = []
  for path in _VS_CT2_FILES:
    result = load(path)
    for run in result['results']:
      if 'row_steps' not in run['ours'] or run['threads'] != 1:
        continue
      ours, ct2 = run['ours'], run['ct2']
      alone = 'row_steps_alone' in ours
      rows.append([f'{result["code"]} ({result["provenance"]["commit"][:7]})',
                   f'`{result["workdir"]}`', str(run['beam_size']),
                   *(f'{count / result["sentences"]:.1f}' for count in (
                       ours['row_steps'], ours['fewest_row_steps'], ct2['fewest_row_steps'])),
                   f'{ours["row_steps_alone"] / result["sentences"]:.1f}' if alone else '–',
                   f'{ours["row_steps"] / ct2["fewest_row_steps"]:.2f}',
                   f'{run["ours_over_ct2"]:.2f}',
                   f'{dropped_as_done(run):.2f}' if alone else '–', link(page, path)])
  return markdown(['our code', 'model', 'beam', 'ours: row-steps a sentence',
                   'fewest for our outputs', 'fewest for CTranslate2\'s',
                   'ours, each sentence searched alone', 'ours / fewest for CTranslate2\'s',
                   'ours / CTranslate2, sentences/s', 'the same, each sentence dropped as it is '
                   'done', 'file'], rows)


def evaluation_time(page: str) -> str:
  """`evaluate` and a training run's dev evaluation, before the levers and after, per file."""
  rows, steps = [], {load(path)['steps'] for path in _EVALUATION_TIME}
  for path in _EVALUATION_TIME:
    result = load(path)
    commits = {'before': result['before_commit'], 'now': result['provenance']['commit']}
    for measured in result['rounds']:
      for variant, commit in commits.items():
        evaluate, dev = measured[variant]['evaluate'], measured[variant]['dev_evaluation']
        rows.append([commit[:7], *(
            f'{evaluate[state]["wall_seconds"]:.1f} s; decoding '
            f'{evaluate[state]["decode_seconds"]:.1f} s, '
            f'{evaluate[state]["decode_compile_seconds"]:.1f} s compiling' for state in
            ('cold', 'warm')),
            f'{dev["seconds"]:.1f} s, {dev["compile_seconds"]:.1f} s compiling',
            f'{evaluate["cold"]["bleu"]:.2f}, {dev["bleu"]:.2f}', link(page, path)])
  return markdown(['our code', '`evaluate`, cache cold', '`evaluate`, cache warm',
                   f'dev evaluation at step {"/".join(map(str, sorted(steps)))}',
                   'BLEU: test, dev', 'file'], rows)


def input_rate(page: str) -> str:
  """A host's training batches a second on one core across epoch boundaries, and its seconds
  dispatching a call of K steps, per file of experiments/input_rate/."""
  rows = []
  for path, result in each_cpu('experiments/input_rate'):  # one JSON per CPU type
    batches, dispatch = result['input'], result['dispatch']
    later = [seconds['cpu'] for name, seconds in batches['planning_seconds'].items()
             if name not in ('packing', '0')]  # each epoch's after the first, by its number
    share = '/'.join(map(str, batches['rows_per_batch']))
    if batches['process_count'] > 1:
      share += f' (host {batches["process_index"] + 1} of {batches["process_count"]})'
    rows.append([
        f'{cpu_type(result)}, {batches["cores"]} core' + 's' * (batches['cores'] > 1),
        f'{batches["pairs"]:,}',
        f'{batches["batches_per_epoch"]}, {share}', f'{batches["first_plan_seconds"]:.1f} s',
        span(later, 2, ' s'), f'{batches["batches_per_second"]:.0f}',
        f'{ms(max(batches["boundary_wait_seconds"]))}; {ms(batches["longest_wait_seconds"])}',
        ', '.join(f'{k}: {ms(seconds)}'
                  for k, seconds in dispatch['host_seconds_per_call'].items()),
        link(page, path)])
  return markdown(['CPU', 'pairs', 'batches an epoch, sequences a batch (this host\'s)',
                   'first plan', 'a later epoch\'s plan (the planner\'s CPU time)', 'batches/s',
                   'longest `next()`: at an epoch boundary; any',
                   'a call of K steps returns after (K: time)', 'file'], rows)


# The configs whose workdirs `workdir_sizes` sizes: (label, config file or sweep file, its rows:
# None for a config file).
_SIZED = [('`configs/base.py`', 'configs/base.py', None),
          ('`configs/big.py`', 'configs/big.py', None),
          ('`configs/multi30k.py`', 'configs/multi30k.py', None),
          ('Table 3 sweep (20 workdirs)', 'experiments/table3_wmt14/sweep.py', 'ROWS')]
# keep_checkpoints before it said 'auto' (41cd033): base's, which big and Table 3's rows took.
_KEPT_BEFORE = 20


def workdir_sizes(page: str) -> str:
  """What a run of each config resolves on each platform and the disk its workdir holds at the
  end of training (`training.footprint`, computed from the configs here, not measured), beside
  the same run's workdir as checkpoints were kept before issue 107."""
  del page
  from transformer_jax.config import fields, platforms  # pylint: disable=import-outside-toplevel
  from transformer_jax.training import footprint  # pylint: disable=import-outside-toplevel
  rows = []
  for label, path, rows_of in _SIZED:
    module = loading.load_module(os.path.join(REPO, path))
    configs = ([module.get_config(row) for row in getattr(module, rows_of)] if rows_of
               else [module.get_config()])
    for platform in platforms.PLATFORMS:
      settings = [footprint.settings(config, platform, devices=8) for config in configs]
      before = []
      for config in configs:
        resolved = platforms.resolved(config, platform)
        if config.train.keep_checkpoints == 'auto':
          resolved = fields.overridden(resolved, [f'train.keep_checkpoints={_KEPT_BEFORE}'])
        before.append(footprint.workdir_bytes(resolved, thinned=False)['workdir_bytes'])
      first = settings[0]
      gigabytes = lambda values: f'{sum(values) / 1e9:.1f} GB'
      rows.append([label, platform, first['dtype'], str(first['steps_per_call']),
                   str(first['bleu_every_steps'] or 'never'),
                   f"{first['checkpoints_kept']}, {first['checkpoints_whole']} whole",
                   gigabytes([s['workdir_bytes'] for s in settings]), gigabytes(before)])
  return markdown(['config', 'platform (8 devices)', 'dtype', 'steps a call', 'BLEU every',
                   'checkpoints kept at the end', 'workdir at the end', 'before (all whole)'],
                  rows)


def bucket_cost(page: str) -> str:
  """A workdir in a bucket against a local one, per file of experiments/buckets/ (the emulator on
  the machine that measured: the package's own costs, not Cloud Storage's)."""
  rows = []
  for path, result in each_cpu('experiments/buckets'):
    trained = result['training_median']
    rows.append([f'`configs/tiny.py`, {result["steps"]} steps (median of '
                 f'{len(result["training"])}): wall time; steps/s',
                 f'{trained["local"]["wall_seconds"]:.1f} s; '
                 f'{trained["local"]["steps_per_second"]:.2f}',
                 f'{trained["bucket"]["wall_seconds"]:.1f} s; '
                 f'{trained["bucket"]["steps_per_second"]:.2f}',
                 cpu_type(result), link(page, path)])
    local, bucket = result['operations']['local'], result['operations']['bucket']
    for name, seconds in bucket.items():
      rows.append([f'{name} (median of {result["rounds"]})',
                   ms(local[name]) if name in local else 'none: a flock',
                   ms(seconds), cpu_type(result), link(page, path)])
  return markdown(['what', 'local disk', 'bucket (emulator)', 'CPU', 'file'], rows)


TABLES: dict[str, Callable[[str], str]] = {
    'results': results,
    'gpu-step': gpu_step,
    'against-pytorch': against_pytorch,
    'options': options,
    'loop': loop,
    'decoding': decoding,
    'cpu-torch': cpu_torch,
    'cpu-loss-chunk': cpu_loss_chunk,
    'cpu-packing': cpu_packing,
    'cpu-compile': cpu_compile,
    'cpu-together': cpu_together,
    'cpu-loop': cpu_loop,
    'side-by-side-overlap': side_by_side_overlap,
    'decoding-vs-ct2': decoding_vs_ct2,
    'decoding-work': decoding_work,
    'evaluation-time': evaluation_time,
    'input-rate': input_rate,
    'workdir-sizes': workdir_sizes,
    'bucket-cost': bucket_cost,
}


def render(page: str, text: str) -> str:
  """`text` of `page` with each marked table written anew."""
  def table(match: re.Match) -> str:
    opening, name, _, closing = match.groups()
    if name not in TABLES:
      raise ValueError(f'{page}: no table named {name!r} (tables.py makes {sorted(TABLES)})')
    return f'{opening}\n{TABLES[name](page)}\n{closing}'

  return MARKER.sub(table, text)


def pages() -> dict[str, tuple[str, str]]:
  """{page: (its text as committed, its text with every table written anew)} of each page that
  holds a table."""
  found = {}
  for pattern in ('*.md', 'docs/*.md', 'experiments/**/*.md'):
    for path in sorted(glob.glob(os.path.join(REPO, pattern), recursive=True)):
      with open(path, encoding='utf-8') as f:
        text = f.read()
      if MARKER.search(text):
        page = os.path.relpath(path, REPO)
        found[page] = (text, render(page, text))
  return found


def main(argv):
  del argv
  for page, (text, new) in pages().items():
    if new != text:
      with open(os.path.join(REPO, page), 'w', encoding='utf-8') as f:
        f.write(new)
      print(f'{page}: tables rewritten')


if __name__ == '__main__':
  app.run(main)
