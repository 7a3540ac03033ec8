"""Every figure a page gives beside a committed result file it links is that file's: each
figure of a paragraph, list item or table row of README.md, docs/ or an experiment's page that
links a JSON or JSONL file under experiments/ (a table or list: also the files its lead-in
paragraph links) is one of the file's values at the printed precision, in the printed unit,
or a ratio of two values side by side in it. A figure the files do not hold is computed from
them here (DERIVED), or its page's **Sources** says it is not backed by a committed result
file, or it is listed with its reason (NOT_FROM_THE_FILES: the paper's, a setting). And
docs/performance.md, the page of current figures, gives each with a file that records its CPU."""

import dataclasses
import functools
import glob
import math
import os
import re
import statistics

import pytest

import test_docs
from transformer_jax.storage import provenance

REPO, PAGES = test_docs.REPO, test_docs.PAGES
LINK = re.compile(r'\[([^\]]*)\]\(([^)\s]+)\)')

# A figure: a number with a decimal point, or a whole number with a unit after it; not part
# of a word, a version (0.10.2), a section (§3.1) or a path. The unit decides how a file's
# value may be printed (FACTORS).
FIGURE = re.compile(r'(?<![\w.§/@~-])(?:(\d+\.\d+)(?:\s?(%|×|ms\b|min\b|s\b|GiB\b|MiB\b|GB\b|'
                    r'million\b|M\b|k\b|x\b))?|(\d+)\s?(%|×(?!\s?[\d(])|ms\b|min\b|s\b|GiB\b|'
                    r'MiB\b|GB\b|million\b|M\b|k\b))(?![\w.]*\.\d)(?![\w/])')
# A file's value v as a page prints it, by unit: (v * factor) at the printed precision.
FACTORS = {
    '': (1,), '%': (100, 1), '×': (1,), 'x': (1,), 'ms': (1000, 1), 's': (1, 0.001),
    'min': (1 / 60, 1), 'GiB': (2**-30, 1), 'MiB': (2**-20, 1), 'GB': (1e-9, 1),
    'million': (1e-6, 1), 'M': (1e-6, 1), 'k': (1e-3, 1),
}

_read = test_docs._read
_prose = test_docs._prose


@dataclasses.dataclass
class Unit:
  """A paragraph, list item or table row of a page, with the result files it cites."""
  text: str
  links: list[str]
  section: str  # the heading it is under
  header: list[str] = dataclasses.field(default_factory=list)  # a table row's header cells


def units(text: str) -> list[Unit]:
  """Each paragraph, list item and table row of a page's prose; a table's rows and a list's
  items also carry the links of the paragraph just before them (their lead-in; a list right
  after a table, the table's), a table's rows its header."""
  found: list[Unit] = []
  section = ''
  for block in re.split(r'\n\s*\n', _prose(text)):
    lines = [line for line in block.split('\n') if line.strip()]
    if lines and re.match(r'#{1,6} ', lines[0]):
      section, lines = lines[0].lstrip('# '), lines[1:]
    rows = [line for line in lines if line.lstrip().startswith('|')]
    if rows:
      lead_in = '\n'.join(line for line in lines if not line.lstrip().startswith('|'))
      if lead_in:
        found.append(Unit(lead_in, [t for _, t in LINK.findall(lead_in)], section))
      above = found[-1].links if found and not found[-1].header else []
      header = _cells(rows[0])
      found += [Unit(row, [t for _, t in LINK.findall(row)] + above, section, header)
                for row in rows[1:] if not re.fullmatch(r'[|\s:-]+', row)]
      continue
    item: list[str] = []
    lead: list[str] = []
    for line in lines + ['- ']:
      if re.match(r'\s*([-*]|\d+\.) ', line) and item:
        joined = '\n'.join(item)
        links = [t for _, t in LINK.findall(joined)]
        is_item = bool(re.match(r'\s*([-*]|\d+\.) ', item[0]))
        previous = found[-1].links if found and found[-1].section == section else []
        found.append(Unit(joined, links + (lead if is_item else []) + (
            previous if is_item and not lead else []), section))
        if not is_item:
          lead = links
        item = []
      item.append(line)
  return found


def _cells(row: str) -> list[str]:
  return [cell.strip() for cell in row.strip().strip('|').split('|')]


def _sources(page: str, links: list[str]) -> list[str]:
  """The committed result files among a unit's links (a linked folder: the JSON files in it),
  repository-relative."""
  found = []
  for target in links:
    if re.match(r'[a-z]+:', target):
      continue
    path = os.path.normpath(os.path.join(os.path.dirname(page), target.partition('#')[0]))
    if not path.startswith('experiments/'):
      continue
    if os.path.isdir(os.path.join(REPO, path)):
      found += sorted(os.path.relpath(p, REPO) for pattern in ('*.json', '*.jsonl')
                      for p in glob.glob(os.path.join(REPO, path, pattern)))
    elif path.endswith(('.json', '.jsonl')):
      found.append(path)
  return found


def _numbers(value) -> list[float]:
  if isinstance(value, bool):
    return []
  if isinstance(value, (int, float)):
    return [float(value)] if math.isfinite(value) else []
  if isinstance(value, dict):
    value = list(value.values())
  if isinstance(value, list):
    return [n for item in value for n in _numbers(item)]
  return []


_records = test_docs._records


def _siblings(value) -> list[list[float]]:
  """The numbers of each dict or list of a JSON value that sit side by side in it."""
  if isinstance(value, dict):
    value = list(value.values())
  if not isinstance(value, list):
    return []
  here = [float(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)
          and math.isfinite(v)]
  return [here] + [group for item in value for group in _siblings(item)]


@functools.cache
def values(path: str) -> frozenset[float]:
  """Every number a JSON file holds, or a JSONL file's records hold."""
  return frozenset(n for record in _records(path) for n in _numbers(record))


@functools.cache
def ratios(path: str) -> frozenset[float]:
  """Each ratio of two numbers side by side in one dict or list of a file (a speed-up of one
  variant over another, as a page gives it)."""
  return frozenset(a / b for record in _records(path) for group in _siblings(record)
                   for a in group for b in group if b and a != b)


def _header_unit(cell: str) -> str:
  """The unit a table's header cell gives its column's bare numbers: '(ms)', 'ms', 's', '%'."""
  found = re.search(r'(?:\(|\b)(ms|s|%|min)\)?\s*$', cell) or re.search(r'\((ms|s|%|min)\b', cell)
  return found.group(1) if found else ''


# The first of two figures that share the second's unit: '47.7 → 43.0 ms', '0.731 / 0.685 s',
# '5.81–6.03 s', '41.9 and 45.3 ms'.
_PAIRED = re.compile(r'(\d+(?:\.\d+)?)(?=\s*(?:→|/|–|to|and)\s*\d+(?:\.\d+)?\s?'
                     r'(%|×|ms\b|s\b|min\b|GiB\b|GB\b))')


def figures(unit: Unit) -> list[tuple[str, str]]:
  """(number, unit) of each figure of a unit, its links' targets and code left out; a table
  row's bare numbers in its column header's unit."""
  def found(text: str, default: str = '') -> list[tuple[str, str]]:
    text = re.sub(r'\]\([^)]*\)', ']', text)
    text = re.sub(r'`[^`]*`', '', text)
    text = _PAIRED.sub(r'\1 \2', text)
    return [(number or whole, unit or whole_unit or (default if number else ''))
            for number, unit, whole, whole_unit in FIGURE.findall(text)]

  if not unit.header:
    return found(unit.text)
  cells = _cells(unit.text)
  return [figure for i, cell in enumerate(cells)
          for figure in found(cell, _header_unit(unit.header[i]) if i < len(unit.header) else '')]


def held(number: str, unit: str, files: list[str]) -> bool:
  """Whether a value of `files`, printed in `unit`, is `number` at its printed precision; a
  '×' or '%' figure may also be a ratio of two values side by side (`ratios`)."""
  decimals = len(number.partition('.')[2])

  def printed(value: float) -> bool:
    return any(f'{value * factor:.{decimals}f}' == number for factor in FACTORS[unit])

  for path in files:
    if any(printed(value) for value in values(path)):
      return True
    if unit in ('×', 'x', '') and any(printed(r) for r in ratios(path)):
      return True
    if unit == '%' and any(printed(abs(r - 1)) for r in ratios(path)):
      return True
  return False


def _not_backed(text: str) -> dict[str, set[str]]:
  """{section: its figures said not to come from a committed file}: those of the text after
  'Not backed by a committed result file:' in a section's paragraphs (its **Sources.**); '*'
  where that says 'every figure of this section'."""
  said: dict[str, set[str]] = {}
  for unit in units(text):
    flat = re.sub(r'\s+', ' ', unit.text)
    _, found, rest = flat.lower().partition('not backed by a committed result file')
    if found:
      said.setdefault(unit.section, set()).update(
          ['*'] if rest.lstrip(': ').startswith('every figure of this section') else
          [number for number, _ in figures(Unit(flat[-len(rest):], [], unit.section))])
  return said


def _jsonl(path: str, **fields) -> list[dict]:
  return [r for r in _records(path) if all(r.get(k) == v for k, v in fields.items())]


def _mean_tokens_ratio(shape: str) -> float:
  """dropout_bits_cpu.jsonl: the mean target tokens/s after over before, of the rounds whose
  command names `shape`."""
  path = 'experiments/speed/dropout_bits_cpu.jsonl'
  mean = lambda label: statistics.mean(r['target_tokens_per_s'] for r in _jsonl(path, label=label)
                                       if shape in r['args'])
  return mean('after') / mean('before')


def _loss_chunk_speedup(chunk: int) -> float:
  path = 'experiments/speed/loss_chunk_cpu.jsonl'
  median = lambda n: statistics.median(r['step_time_s'] for r in _jsonl(path, loss_chunk=n))
  return median(0) / median(chunk)


def _compile_seconds(run: str) -> float:
  return _records('experiments/speed/compile_time_multi30k_cpu.json')[0]['means'][run][
      'seconds_to_end']


def _batch_ms(variant: str) -> float:
  result = _records('experiments/speed/batch_assembly_multi30k_cpu.json')[0]
  return 1000 * result['median_seconds'][variant] / result['batches']


def _h200_hours(name: str, steps: int) -> float:
  [record] = _jsonl('experiments/gpu/h200/fused_loss/benchmarks.jsonl', name=name)
  return record['result']['step_time_s'] * steps / 3600


def _waited_over_back_to_back_ms(pick) -> float:
  """fused_loss/benchmarks.jsonl: `pick` (min, max) of each run's waited step time less its
  back-to-back one, in ms."""
  return pick(1000 * (r['result']['step_time_waited_s'] - r['result']['step_time_s'])
              for r in _records('experiments/gpu/h200/fused_loss/benchmarks.jsonl'))


def _h200_decoding_speedup() -> float:
  result = _records('experiments/gpu/h200/decode_vs_torch.json')[0]
  return (result['transformer_jax']['sentences_per_second']
          / result['transformers_marian']['sentences_per_second'])


def _prng_saving_percent() -> float:
  step = lambda impl: _records(f'experiments/gpu/h200/prng/base_bf16_{impl}.json')[0][
      'step_time_s']
  return 100 * (1 - step('rbg') / step('threefry'))


def _multi30k_h200_step_ms() -> float:
  [loop] = _jsonl('experiments/gpu/h200/window_2026-11-28.jsonl', part='loop_speed')
  return 1000 / loop['result']['steps_per_second_median']['benchmark K=32']


def _side_by_side_devices(steps_per_call: int) -> float:
  """K·t / h: the H200's multi30k step t, the host's seconds a call h with 8 groups."""
  [found] = [r for r in _records('experiments/side_by_side/host_seconds_cpu.json')[0]['results']
             if r['groups'] == 8 and r['steps_per_call'] == steps_per_call]
  return steps_per_call * _multi30k_h200_step_ms() / 1000 / found['host_seconds_per_call']


def _multi30k_e2e_step_ms() -> float:
  [run] = _jsonl('experiments/gpu/h200/window_2026-11-28b.jsonl', part='multi30k_e2e')
  return 1000 * run['result']['train_seconds']['steps'] / run['result']['dev']['step']


def _h200_step_at_mfu_ms(mfu: float, flops_per_second: float) -> float:
  [record] = _jsonl('experiments/gpu/h200/fused_loss/benchmarks.jsonl', name='base_bf16_chunk16')
  return 1000 * record['result']['model_flops_per_step'] / (mfu * flops_per_second)


def _ct2_over_ours(cpu: str, result: int, threads: int = 1) -> float:
  """CTranslate2's speed over ours in the `result`-th decoding (greedy, beam 5) of
  hf_export/`cpu`.json."""
  [record] = _records(f'experiments/hf_export/{cpu}.json')
  return test_docs.ct2_over_ours(record['results'][result], threads)


def _mean_target_length() -> float:
  """L, the mean length of the training targets, from the exported β = α·L / (5 + L)."""
  [record] = _records('experiments/hf_export/cpu.json')
  beta, alpha = record['transformers_length_penalty'], record['alpha']
  return 5 * beta / (alpha - beta)


_SPEED = 'experiments/speed/README.md'
_GPU = 'experiments/gpu/README.md'
_TABLE3 = 'experiments/table3_multi30k/README.md'
# Figures a page computes from a file's values rather than copies: (page, figure as printed)
# -> its value in the printed unit, computed here from the file (or, for a formula, from the
# formula).
DERIVED = {
    (_SPEED, '1.14×'): lambda: _mean_tokens_ratio('configs/multi30k.py'),
    (_SPEED, '1.10×'): lambda: _mean_tokens_ratio(':tiny'),
    (_SPEED, '1.09×'): lambda: _loss_chunk_speedup(2),
    (_SPEED, '1.08×'): lambda: _loss_chunk_speedup(8),
    (_SPEED, '41s'): lambda: _compile_seconds('cache, cold') - _compile_seconds('cache, warm'),
    (_SPEED, '0.4ms'): lambda: _batch_ms('this'),
    (_SPEED, '2.4ms'): lambda: _batch_ms('before'),
    ('docs/training.md', '7.2'): lambda: _h200_hours('big_bf16_chunk16', 300_000),
    # Root mean squares of a position table's start: normal(0, d_model^-0.5) at d_model 128,
    # and Glorot-uniform over 256 x 128 (sqrt(2 / (fan_in + fan_out))).
    (_GPU, '3.2ms'): lambda: _waited_over_back_to_back_ms(min),
    (_GPU, '4.0ms'): lambda: _waited_over_back_to_back_ms(max),
    (_GPU, '24.6ms'): lambda: _h200_step_at_mfu_ms(0.5, 775e12),
    (_GPU, '1.8%'): _prng_saving_percent,
    (_GPU, '8.1×'): _h200_decoding_speedup,
    (_GPU, '1.38×'): lambda: _records('experiments/hf_export/cpu.json')[0]['results'][1][
        'speed_ratio'],
    ('experiments/side_by_side/README.md', '5.3ms'): _multi30k_h200_step_ms,
    ('docs/performance.md', '5.3ms'): _multi30k_h200_step_ms,
    ('experiments/side_by_side/README.md', '1.4'): lambda: _side_by_side_devices(1),
    ('experiments/side_by_side/README.md', '9.7'): lambda: _side_by_side_devices(4),
    ('docs/performance.md', '7.1ms'): _multi30k_e2e_step_ms,
    (_GPU, '7.1ms'): _multi30k_e2e_step_ms,
    ('experiments/sweep_overhead/README.md', '0.84'): lambda: (lambda median: median['now'][
        'wall_seconds'] / median['before']['wall_seconds'])(_records(
            'experiments/sweep_overhead/cpu_next_group_only.json')[0]['median']),
    ('docs/evaluation.md', '2.20×'): lambda: _ct2_over_ours('cpu', 0),
    ('docs/evaluation.md', '2.38×'): lambda: _ct2_over_ours('cpu', 1),
    ('docs/evaluation.md', '3.49×'): lambda: _ct2_over_ours('cpu', 0, threads=2),
    ('docs/evaluation.md', '3.99×'): lambda: _ct2_over_ours('cpu', 1, threads=2),
    ('docs/evaluation.md', '2.17×'): lambda: _ct2_over_ours('intel_xeon_avx512', 0),
    ('docs/evaluation.md', '16.0'): _mean_target_length,
    ('docs/evaluation.md', '2.92×'): lambda: _ct2_over_ours('intel_xeon_avx512', 1),
    (_TABLE3, '0.088'): lambda: 128**-0.5,
    (_TABLE3, '0.072'): lambda: math.sqrt(2 / (256 + 128)),
}
# Figures beside a result file that no committed file holds, and why.
NOT_FROM_THE_FILES = {
    (_TABLE3, '25.7'): "the paper's Table 3: row (E)'s BLEU",
    (_TABLE3, '25.8'): "the paper's Table 3: the base model's BLEU",
    (_TABLE3, '4.92'): "the paper's Table 3: the perplexity of (E) and of base",
    ('docs/training.md', '100k'): "the paper's training steps of base (§5.2)",
    ('docs/training.md', '300k'): "the paper's training steps of big (§5.2)",
    ('docs/performance.md', '80GB'): "the GPU's name (NVIDIA H100 80GB HBM3)",
    ('experiments/gpu/README.md', '80GB'): "the GPU's name (NVIDIA H100 80GB HBM3)",
    (_SPEED, '0.1'): "settings: the models' dropout and label smoothing",
    ('docs/performance.md', '3×'): 'a formula: model FLOPs are 3 times the forward ones',
    ('docs/performance.md', '2ms'): 'an expectation: 500 steps/s, not a measurement',
    ('docs/data.md', '0.246'): 'printed by `python -m transformer_jax.data --inspect`',
    ('docs/data.md', '0.064'): 'printed by `python -m transformer_jax.data --inspect`',
    ('docs/data.md', '0.045'): 'printed by `python -m transformer_jax.data --inspect`',
    ('docs/data.md', '100million'): 'a setting: data.max_corpus_chars',
    ('experiments/data_scale/README.md', '24GiB'): "the machine's memory",
    ('docs/faithfulness.md', '100M'): "a setting: the tokenizer's sample of training text",
    ('docs/faithfulness.md', '0.4s'): "the paper's step time of base (§5.2)",
    ('docs/faithfulness.md', '1.6'): "worked out on the linked results page from the rows'",
    ('docs/faithfulness.md', '0.86'): "worked out on the linked results page from the rows'",
    (_GPU, '38.2ms'): 'the busy time of the Perfetto trace the paragraph links (not parsed here)',
    (_GPU, '191.2ms'): 'the span of the Perfetto trace the paragraph links (not parsed here)',
    (_GPU, '2.6ms'): 'the gaps between kernels of the Perfetto trace the paragraph links',
    (_GPU, '5.7ms'): "the sum of five kernels' times of the linked profile, added by hand",
    (_GPU, '2.8ms'): "the sum of three kernels' times of N 4's profile, added by hand",
    (_GPU, '21ms'): "the step's 37.4 ms less its products' 16.2 ms, rounded",
    (_SPEED, '0.2'): "a setting: row D3's dropout",
}


def unsourced(page: str) -> list[str]:
  """The figures of `page` beside result files it links that those files do not give."""
  text = _read(page)
  said = _not_backed(text)
  wrong = []
  for unit in units(text):
    files = _sources(page, unit.links)
    if not files or (page == 'README.md' and unit.section == 'Results'):
      continue  # the README's Results: every figure checked by test_docs.py's SOURCES
    for number, printed_unit in figures(unit):
      figure = number + printed_unit
      if (held(number, printed_unit, files) or number in said.get(unit.section, ())
          or '*' in said.get(unit.section, ()) or (page, figure) in NOT_FROM_THE_FILES):
        continue
      if (page, figure) in DERIVED:
        value = DERIVED[page, figure]()
        if f'{value:.{len(number.partition(".")[2])}f}' == number:
          continue
      wrong.append(f'{figure} in {unit.text[:60]!r}')
  return wrong


@pytest.mark.parametrize('page', PAGES)
def test_every_figure_beside_a_result_file_is_that_files(page):
  wrong = unsourced(page)
  assert not wrong, f'{page}: figures their linked result files do not give: {wrong}'


def test_a_figure_the_file_does_not_hold_is_found():
  page = ('## A\n\nThe loop takes 0.623 s a step and 12.5 ms to start '
          '([loss_chunk_cpu.jsonl](../experiments/speed/loss_chunk_cpu.jsonl)).\n')
  [unit] = units(page)
  files = _sources('docs/x.md', unit.links)
  assert files == ['experiments/speed/loss_chunk_cpu.jsonl']
  assert [held(n, u, files) for n, u in figures(unit)] == [True, False]
  assert _not_backed('## A\n\nNot backed by a committed result file: 12.5 ms.\n') == {
      'A': {'12.5'}}
  row = Unit('| 2 | 622.9 | 1.09× |', [], 'A', ['N', 'round 1 (ms)', 'speed-up'])
  assert figures(row) == [('622.9', 'ms'), ('1.09', '×')]


def test_every_registered_figure_is_one_its_page_gives():
  """No stale entry: each figure of DERIVED and NOT_FROM_THE_FILES is still on its page."""
  given = {page: {number + unit for u in units(_read(page)) for number, unit in figures(u)}
           for page, _ in list(DERIVED) + list(NOT_FROM_THE_FILES)}
  stale = [key for key in list(DERIVED) + list(NOT_FROM_THE_FILES) if key[1] not in given[key[0]]]
  assert not stale, stale


def _devices(record, depth: int = 0) -> set[str]:
  """The device kinds a result record names ('device', 'jax_device'), a few levels down."""
  if not isinstance(record, dict) or depth > 3:
    return set()
  found = {str(record[key]) for key in ('device', 'jax_device') if key in record}
  return found.union(*(_devices(value, depth + 1) for value in record.values()))


def cpu_problems(page: str) -> list[str]:
  """Where `page` gives a figure without a result file that holds it, or one measured on a CPU
  (the file's records name no other device) without that CPU: the file records no processor,
  or the figure's section does not name it as `provenance.cpu_type` does."""
  text = _read(page)
  sections: dict[str, str] = {}
  for unit in units(text):
    sections[unit.section] = sections.get(unit.section, '') + '\n' + unit.text
  problems = []
  for unit in units(text):
    given = [number + unit_ for number, unit_ in figures(unit)]
    files = _sources(page, unit.links)
    if not files and any((page, f) not in NOT_FROM_THE_FILES and (page, f) not in DERIVED
                         for f in given):
      problems.append(f'figures without a result file: {given} in {unit.text[:50]!r}')
    for path in files:
      records = _records(path)
      if any(_devices(r) - {'cpu'} for r in records):
        continue  # an accelerator's
      for machine in test_docs._machines(path):
        if not isinstance(machine, dict) or not machine.get('processor'):
          problems.append(f'{path} records no processor')
        elif provenance.cpu_type(machine) not in re.sub(r'\s+', ' ', sections[unit.section]):
          problems.append(f'{unit.section}: does not name {provenance.cpu_type(machine)} '
                          f'({path})')
  return sorted(set(problems))


def test_the_performance_page_gives_each_figure_with_its_source_and_cpu():
  """docs/performance.md, the page of current figures: each paragraph, item or row with a
  figure links the result file that holds it (or the figure is DERIVED or NOT_FROM_THE_FILES),
  and a CPU's figures come from files that record the processor, named in their section."""
  assert not cpu_problems('docs/performance.md')
