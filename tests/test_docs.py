"""The documentation points at things that exist: every test that docs/faithfulness.md names
as a claim's check is a test function of that file, and every relative link of the Markdown
pages reaches a file, and a heading of it where the link names one (GitHub's anchors); and
every figure of the README's Results headlines (each headline has at least one) is computed
from its source, which reads the JSON or JSONL written by the script that measured it (a
hand-written page is for reading, never a source; a literal is no source)."""

import functools
import glob
import importlib.util
import io
import json
import os
import re
import statistics
import tokenize

import pytest

from transformer_jax.storage import provenance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    os.path.relpath(path, REPO)
    for pattern in ('*.md', 'docs/*.md', 'experiments/*.md', 'experiments/*/*.md',
                    'experiments/*/*/*.md', 'tests/*.md')
    for path in glob.glob(os.path.join(REPO, pattern)))
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')


def _read(path: str) -> str:
  with open(os.path.join(REPO, path), encoding='utf-8') as f:
    return f.read()


def _prose(text: str) -> str:
  """A page without its fenced code blocks, whose '#' lines and brackets are code."""
  return re.sub(r'^```.*?^```', '', text, flags=re.M | re.S)


def _anchor(heading: str) -> str:
  """GitHub's anchor of a heading: lowercased, punctuation but hyphens dropped, spaces -> '-'."""
  return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


def _anchors(text: str) -> set[str]:
  return {_anchor(line.lstrip('#')) for line in _prose(text).splitlines()
          if re.match(r'#{1,6} ', line)}


def test_anchors_follow_githubs_rule():
  assert _anchor('On one GPU (NVIDIA H200)') == 'on-one-gpu-nvidia-h200'
  assert _anchor("The decoder's start vector: learned") == 'the-decoders-start-vector-learned'
  assert _anchor('WMT 2014 at full scale') == 'wmt-2014-at-full-scale'


def test_code_blocks_are_not_prose():
  page = '# Title\n```bash\n# a comment\n```\ntext [a](b)\n'
  assert _anchors(page) == {'title'}
  assert LINK.findall(_prose(page)) == ['b']


def test_the_pages_are_found():
  assert {'README.md', 'docs/faithfulness.md', 'experiments/README.md',
          'experiments/multi30k/README.md', 'tests/README.md'} <= set(PAGES)


def test_faithfulness_names_tests_that_exist():
  cited = []
  for row in _read('docs/faithfulness.md').splitlines():
    # `test_x.py::name`, then `::other` for more tests of the same file.
    module = None
    for match in re.finditer(r'`(?:tests/)?(test_\w+\.py)?::(\w+)', row):
      module = match.group(1) or module
      assert module, f'{match.group(0)} names no file: {row[:80]}'
      cited.append((module, match.group(2)))
  assert len(cited) > 15  # the table's checks were all read
  missing = [f'{module}::{name}' for module, name in cited
             if not re.search(rf'^def {name}\(', _read(os.path.join('tests', module)), re.M)]
  assert not missing, f'docs/faithfulness.md names tests that do not exist: {missing}'


@pytest.mark.parametrize('page', PAGES)
def test_relative_links_reach_a_file_and_heading(page):
  broken = []
  for target in LINK.findall(_prose(_read(page))):
    if re.match(r'[a-z]+:', target):  # https:, mailto:
      continue
    path, _, anchor = target.partition('#')
    path = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
    if not os.path.exists(os.path.join(REPO, path)):
      broken.append(target)
    elif anchor and path.endswith('.md') and anchor not in _anchors(_read(path)):
      broken.append(target)
  assert not broken, f'{page}: links that reach nothing: {broken}'


# A figure of the README's Results table: a number not inside a word, a section sign or
# backticks (stripped first), with its unit if it is '%', 'ms' or 'min' (other units, '×',
# 's', 'GiB', 'million tokens/s', follow the number apart and are the source's to compute in).
FIGURE = re.compile(r'(?<![\w.§])(\d+(?:\.\d+)?)(%| ?ms\b| ?min\b)?(?![\w.])')

# Every file a figure's source read, for the test to check that its row links it.
_READ: list[str] = []


def _load(path: str):
  """A machine-written result by its repo-relative path under experiments/: a JSON file's
  value, or a JSONL file's records as a list. A hand-written page is no source."""
  assert path.startswith('experiments/') and path.endswith(('.json', '.jsonl')), path
  _READ.append(path)
  text = _read(path)
  if path.endswith('.jsonl'):
    return [json.loads(line) for line in text.splitlines() if line.strip()]
  return json.loads(text)


def _record(path: str, **fields) -> dict:
  """The one record of a JSONL file whose `fields` have these values."""
  found = [r for r in _load(path) if all(r.get(k) == v for k, v in fields.items())]
  assert len(found) == 1, f'{path}: {len(found)} records with {fields}'
  return found[0]


@functools.cache
def _table3_trends_module():
  spec = importlib.util.spec_from_file_location(
      'table3_trends', os.path.join(REPO, 'experiments', 'table3_multi30k', 'trends.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _side_by_side(groups: int, steps_per_call: int) -> dict:
  """The host's seconds a call of `groups` groups side by side at `steps_per_call`."""
  found = [r for r in _load('experiments/side_by_side/host_seconds_cpu.json')['results']
           if r['groups'] == groups and r['steps_per_call'] == steps_per_call]
  assert len(found) == 1, found
  return found[0]


def _table3() -> tuple[dict, list]:
  """The miniature Table 3 as experiments/table3_multi30k/trends.py reads the sweep's row JSONs:
  ({row: {'ppl': [...], 'bleu': [...]}, one entry per seed}, [(trend, True / False / None)])."""
  directory = 'experiments/table3_multi30k/rows'
  _READ.append(directory)
  trends = _table3_trends_module()
  rows = trends.load(os.path.join(REPO, directory))
  return rows, trends.trends(rows)


_M30K_SEEDS = [f'experiments/multi30k/postnorm_lowercase_zero_start_12k{seed}_test.json'
               for seed in ('', '_seed1', '_seed2', '_seed3')]  # seeds 0-3, as `evaluate` wrote


def _m30k_bleu() -> list[float]:
  return [_load(path)['bleu_tokenized_lowercase_unsplit'] for path in _M30K_SEEDS]


_POSTNORM = 'experiments/postnorm/rows/post_fused.json'
_TINY_TIMES = 'experiments/speed/compile_time_tiny_intel_xeon_avx512.json'
_TINY_CPUS = 'experiments/quickstart/variation'  # one JSON per CPU type
_M30K_TIMES = 'experiments/speed/compile_time_multi30k_intel_xeon_avx512.json'
_PACKING = 'experiments/speed/packing_intel_xeon_avx512.json'
_LOOP = 'experiments/speed/loop_cpu.json'
_LOOP_K8 = 'experiments/speed/loop_k8_cpu.json'
_LOOP_INTEL = 'experiments/speed/loop_intel_xeon_avx512.json'
_LOSS_CHUNK = 'experiments/speed/loss_chunk_intel_xeon_avx512.jsonl'
_DATA_SCALE = 'experiments/data_scale/data_scale_intel_xeon_avx512.json'
_H100 = 'experiments/gpu/h100/window_2026-11-27.jsonl'
_H200 = 'experiments/gpu/h200/fused_loss/benchmarks.jsonl'
_H200_WINDOW = 'experiments/gpu/h200/window_2026-11-28b.jsonl'
_HF = 'experiments/hf_export'  # one JSON per CPU type, each of a run trained on that CPU
_SWEEP_OVERHEADS = ('experiments/sweep_overhead/cpu.json',
                    'experiments/sweep_overhead/intel_xeon_avx512.json')  # one per CPU type
_TORCH_CPUS = 'experiments/speed/torch_baseline'  # one JSON per CPU type


def _loop_over_benchmark(k: int) -> list[float]:
  """The loop's steps/s over the benchmark's at K steps a call, one figure per CPU type: the
  AMD EPYC's from its files (K = 8 from its four-round run), the Intel Xeon's from its one run."""
  epyc = _load(_LOOP if k == 1 else _LOOP_K8)['loop_over_benchmark'][f'K={k}']
  return [epyc, _load(_LOOP_INTEL)['loop_over_benchmark'][f'K={k}']]


def _together_over_apart() -> list[float]:
  """Rows per hour as one program over one after another, one figure per CPU type."""
  return [(lambda r: r['together'] / r['apart'])(_load(path)['rows_per_hour'])
          for path in ('experiments/speed/together_cpu.json',
                       'experiments/speed/together_intel_xeon_avx512.json')]


def _outside_steps_per_group(variant: str) -> list[float]:
  """The sweep's median seconds outside training steps per group, one figure per CPU type."""
  return [_load(path)['median'][variant]['outside_steps_per_group'] for path in _SWEEP_OVERHEADS]


def _each_cpu(folder: str) -> list:
  """The JSON files of a folder that holds one per CPU type, loaded, in name order."""
  return [_load(os.path.relpath(path, REPO))
          for path in sorted(glob.glob(os.path.join(REPO, folder, '*.json')))]


def _torch_speedups(shape: str) -> list[float]:
  """transformer_jax's target tokens/s over PyTorch's at `shape`, one figure per CPU type."""
  return [result['shapes'][shape]['speedup_over_torch'] for result in _each_cpu(_TORCH_CPUS)]


def _hf_exports(result: int, value) -> list[float]:
  """`value` of the `result`-th decoding (greedy, beam 5) of hf_export/check.py's file for each
  CPU type."""
  return [value(figures['results'][result]) for figures in _each_cpu(_HF)]


def ct2_over_ours(decoding: dict, threads: int = 1) -> float:
  """CTranslate2's sentences/s on `threads` threads over ours, in one decoding of
  hf_export/check.py's file."""
  return 1 / decoding['ctranslate2'][f'{threads}_threads']['time_over_ours']


def _tiny_by_cpu() -> list[dict]:
  """The quick start's run on each CPU type quickstart_variation.py ran on."""
  return [next(r for r in variation['runs'] if r['setting'] == 'this CPU')
          for variation in _each_cpu(_TINY_CPUS)]


def _tiny_bleu_by_cpu() -> list[float]:
  """The quick start's dev BLEU on each CPU type."""
  return [run['dev_bleu'] for run in _tiny_by_cpu()]


def _tiny_step_by_cpu() -> int:
  """The step of the quick start's last dev evaluation, the same on every CPU type."""
  [step] = {run['step'] for run in _tiny_by_cpu()}
  return step


def _loss_chunk_median(chunk: int) -> float:
  return statistics.median(r['step_time_s'] for r in _load(_LOSS_CHUNK)
                           if r['loss_chunk'] == chunk)


def _wmt_size() -> dict:
  """data_scale's largest corpus (WMT14's size): its first preparation and read."""
  return max(_load(_DATA_SCALE)['rows'], key=lambda row: row['pairs'])['first']


def _h100(part: str, shape: str) -> dict:
  return _record(_H100, part=part)['result']['shapes'][shape]


def _h200(name: str) -> dict:
  return _record(_H200, name=name)['result']


# The source of every figure of the README's Results headlines, row by row (keyed by the start
# of the row's first cell): the figure as printed (with its unit if FIGURE reads one), and its
# value in the printed unit computed from the JSON / JSONL that the script that measured it
# wrote. A page that discusses a figure may be linked for reading, but is never its source; a
# figure this project did not measure (a published one) belongs in the row's description.
SOURCES = {
    'Multi30k EN→DE test2016': [
        ('40.63', lambda: statistics.mean(_m30k_bleu())),
        ('40.23', lambda: min(_m30k_bleu())),
        ('41.17', lambda: max(_m30k_bleu())),
    ],
    'Table 3 in miniature': [
        ('3', lambda: sum(ok is True for _, ok in _table3()[1])),
        ('8', lambda: len(_table3()[1])),
        ('37.99', lambda: statistics.mean(_table3()[0]['base']['bleu'])),
    ],
    'Post-norm (§3.1)': [
        ('6.14', lambda: _load(_POSTNORM)['perplexity']),
        ('4000', lambda: _load(_POSTNORM)['checkpoint_steps'][-1]),
        ('37.11', lambda: _load(_POSTNORM)['bleu_tokenized']),
    ],
    'The quick start': [
        ('1200', lambda: _tiny_step_by_cpu()),
        ('98.6', lambda: min(_tiny_bleu_by_cpu())),
        ('99.7', lambda: max(_tiny_bleu_by_cpu())),
        ('2', lambda: len(_tiny_bleu_by_cpu())),  # CPU types
        ('214', lambda: _load(_TINY_TIMES)['means']['cache, cold']['seconds_to_end']),
        ('198', lambda: _load(_TINY_TIMES)['means']['cache, warm']['seconds_to_end']),
    ],
    'The persistent compilation cache': [
        ('182', lambda: _load(_M30K_TIMES)['means']['cache, warm']['seconds_to_end']),
        ('226', lambda: _load(_M30K_TIMES)['means']['cache, cold']['seconds_to_end']),
    ],
    'Four sweep rows as one program': [  # over the CPU types: min, then max
        ('1.17', lambda: min(_together_over_apart())),
        ('1.22', lambda: max(_together_over_apart())),
    ],
    'A sweep of three groups': [  # over the CPU types: min, then max
        ('15.3', lambda: min(_outside_steps_per_group('now'))),
        ('21.3', lambda: max(_outside_steps_per_group('now'))),
        ('46.6', lambda: min(_outside_steps_per_group('before'))),
        ('78.1', lambda: max(_outside_steps_per_group('before'))),
    ],
    'The training loop against': [  # over the CPU types: min, then max
        ('1.02', lambda: min(_loop_over_benchmark(1))),
        ('1.03', lambda: max(_loop_over_benchmark(1))),
        ('0.97', lambda: min(_loop_over_benchmark(8))),
        ('1.01', lambda: max(_loop_over_benchmark(8))),
    ],
    'Training throughput against PyTorch': [  # over the CPU types: min, then max
        ('1.02', lambda: min(_torch_speedups('tiny'))),
        ('1.23', lambda: max(_torch_speedups('tiny'))),
        ('0.96', lambda: min(_torch_speedups('base'))),
        ('1.11', lambda: max(_torch_speedups('base'))),
    ],
    'The projection and loss fused': [
        ('0.622', lambda: _loss_chunk_median(2)),
        ('0.696', lambda: _loss_chunk_median(0)),
    ],
    'Sequence packing': [
        ('1.16', lambda: _load(_PACKING)['runs']['32']['ratio']),
        ('32', lambda: int(sorted(_load(_PACKING)['runs'], key=int)[1])),
        ('1.25', lambda: _load(_PACKING)['runs']['64']['ratio']),
        ('64', lambda: int(sorted(_load(_PACKING)['runs'], key=int)[2])),
    ],
    'Your own corpus at WMT14': [
        ('7.5 min', lambda: _wmt_size()['wall_seconds'] / 60),
        ('1.26', lambda: _wmt_size()['peak_memory_bytes'] / 2**30),  # GiB
        ('50.8', lambda: _wmt_size()['pipeline_tokens_per_second'] / 1e6),  # million tokens/s
    ],
    'One NVIDIA H100': [
        ('1.18', lambda: _h100('torch_base_bfloat16', 'configs/base.py')[
            'speedup_over_torch_compiled']),
        ('1.99', lambda: _h100('torch_base_bfloat16', 'configs/base.py')['speedup_over_torch']),
        ('30.1%', lambda: 100 * _h100('torch_base_bfloat16', 'configs/base.py')['jax_mfu']),
        ('1.09', lambda: _h100('torch_big_bfloat16', 'configs/big.py')[
            'speedup_over_torch_compiled']),
        ('1.64', lambda: _h100('torch_big_bfloat16', 'configs/big.py')['speedup_over_torch']),
        ('50.0%', lambda: 100 * _h100('torch_big_bfloat16', 'configs/big.py')['jax_mfu']),
    ],
    '`configs/multi30k.py` end to end': [
        ('256', lambda: _record(_H200_WINDOW, part='multi30k_e2e')['seconds']),
        ('41.13', lambda: _record(_H200_WINDOW, part='multi30k_e2e')['result']['test'][
            'bleu_detokenized']),
    ],
    'One NVIDIA H200': [
        ('37.4 ms', lambda: 1000 * _h200('base_bf16_chunk16')['step_time_s']),
        ('36%', lambda: 100 * _h200('base_bf16_chunk16')['mfu']),
        ('86.0 ms', lambda: 1000 * _h200('big_bf16_chunk16')['step_time_s']),
        ('51%', lambda: 100 * _h200('big_bf16_chunk16')['mfu']),
    ],
    'Sweep groups side by side': [
        ('2.18 ms', lambda: 1000 * _side_by_side(8, 4)['host_seconds_per_call']),
        ('4', lambda: _side_by_side(8, 4)['steps_per_call']),
        ('8', lambda: _side_by_side(8, 4)['groups']),
    ],
    'A `configs/multi30k.py` run (3000 steps) exported': [
        ('1000', lambda: min(_hf_exports(0, lambda r: r['same_translations']))),  # greedy
        ('1.32', lambda: min(_hf_exports(0, lambda r: r['speed_ratio']))),
        ('1.53', lambda: max(_hf_exports(0, lambda r: r['speed_ratio']))),
        ('2.17', lambda: min(_hf_exports(0, ct2_over_ours))),
        ('2.20', lambda: max(_hf_exports(0, ct2_over_ours))),
        ('5', lambda: _hf_exports(1, lambda r: r['beam_size'])[0]),
        ('991', lambda: min(_hf_exports(1, lambda r: r['same_translations']))),
        ('995', lambda: max(_hf_exports(1, lambda r: r['same_translations']))),
        ('1.38', lambda: min(_hf_exports(1, lambda r: r['speed_ratio']))),
        ('1.41', lambda: max(_hf_exports(1, lambda r: r['speed_ratio']))),
        ('2.38', lambda: min(_hf_exports(1, ct2_over_ours))),
        ('2.92', lambda: max(_hf_exports(1, ct2_over_ours))),
    ],
}


def _printed(value: float, figure: str) -> str:
  """`value` at the printed figure's precision: as many decimals as the figure has."""
  decimals = len(FIGURE.fullmatch(figure).group(1).partition('.')[2])
  return f'{value:.{decimals}f}'


def _figures(headline: str) -> list[str]:
  """The figures of a headline cell as printed, each with its unit where FIGURE reads one."""
  return [number + unit for number, unit in FIGURE.findall(re.sub(r'`[^`]*`', '', headline))]


def test_figure_matching():
  assert _figures('§3.1 test2016 1.22× 72 M, 4.5M (N 3) `beam 5`') == ['1.22', '72', '3']
  assert _figures('37.4 ms a step, 36% MFU; 5.2 min') == ['37.4 ms', '36%', '5.2 min']
  assert _printed(37.362, '37.4 ms') == '37.4' and _printed(0.9953, '1.00') == '1.00'
  assert _printed(150.82, '151') == '151' and _printed(36.007, '36%') == '36'
  assert _printed(1.2149, '1.22') != '1.22'


def _results_rows() -> list[list[str]]:
  section = _read('README.md').split('\n## Results\n')[1].split('\n## ')[0]
  rows = [[cell.strip() for cell in line.strip('|').split(' | ')] for line in section.splitlines()
          if line.startswith('| ') and not line.startswith('| result |')]
  assert len(rows) >= 10 and all(len(row) == 4 for row in rows)
  return rows


def test_every_source_names_one_row():
  rows = _results_rows()
  assert {key: sum(row[0].startswith(key) for row in rows) for key in SOURCES} == {
      key: 1 for key in SOURCES}


@pytest.mark.parametrize('row', _results_rows(), ids=lambda row: row[0][:40])
def test_readme_figures_are_computed_from_the_json_their_row_links(row):
  """Each figure of the headline column has its source in SOURCES: the JSON / JSONL written by
  the script that measured it, which gives the printed figure at its printed precision, and
  which the row links (a page it links is for reading). A new figure needs a source."""
  keys = [key for key in SOURCES if row[0].startswith(key)]
  assert len(keys) == 1, f'{row[0]}: no entry in SOURCES'
  sources = SOURCES[keys[0]]
  printed, sourced = _figures(row[1]), [figure for figure, _ in sources]
  assert printed, f'{row[0]}: a headline without a figure'
  assert printed == sourced, f'{row[0]}: the headline prints {printed}, SOURCES has {sourced}'
  linked = [os.path.normpath(target.partition('#')[0]) for target in LINK.findall(row[3])
            if not re.match(r'[a-z]+:', target)]
  wrong, unread, unlinked = [], [], set()
  for figure, source in sources:
    _READ.clear()
    value = source()
    if not _READ:  # a literal, or a figure computed from nothing committed
      unread.append(figure)
    if _printed(value, figure) != FIGURE.fullmatch(figure).group(1):
      wrong.append(f'{figure} (its source gives {value})')
    unlinked.update(path for path in _READ
                    if not any(path == link or path.startswith(link + '/') for link in linked))
  assert not unread, f'{row[0]}: figures whose sources read no result file: {unread}'
  assert not wrong, f'{row[0]}: figures their sources do not give: {wrong}'
  assert not unlinked, f'{row[0]}: sources the row does not link: {sorted(unlinked)}'


def _machines(path: str) -> list[dict | None]:
  """The machine each measurement of a result file records (its provenance's, its own
  'machine', or a JSONL file's records'); [None] where it records none; [] for a folder."""
  if not path.endswith(('.json', '.jsonl')):
    return []
  return [record.get('provenance', {}).get('machine') or record.get('machine')
          for record in _records(path)]


def _records(path: str) -> list:
  """A JSONL file's records, or a JSON file's value as the one record."""
  return _load(path) if path.endswith('.jsonl') else [_load(path)]


def _sources_read(row: list[str]) -> list[str]:
  keys = [key for key in SOURCES if row[0].startswith(key)]
  read = []
  for _, source in SOURCES[keys[0]]:
    _READ.clear()
    source()
    read += [path for path in _READ if path not in read]
  return read


@pytest.mark.parametrize('row', _results_rows(), ids=lambda row: row[0][:40])
def test_a_cpu_headline_names_the_cpu_of_each_source_and_its_range(row):
  """A row measured on CPUs (its description says 'CPU') rests on files that record their
  processor, names each CPU type they record (`provenance.cpu_type`: 'AMD EPYC', 'Intel Xeon
  (AVX-512)') and, over two or more types, gives its headline as a range."""
  machines = [machine for path in _sources_read(row) for machine in _machines(path)]
  cpu = [m for m in machines if m is not None and m.get('device', 'cpu') == 'cpu']
  if 'CPU' not in row[0]:
    assert not cpu, f'{row[0]}: measured on a CPU, which its description does not say'
    return
  assert None not in machines, f'{row[0]}: a source that records no processor'
  types = sorted({provenance.cpu_type(machine) for machine in cpu})
  assert types and all(name in row[0] for name in types), (row[0], types)
  if len(types) > 1:
    assert re.search(r'\d\s?(?:–|to)\s?\d', row[1]), f'{row[1]}: no range over {types}'
    assert 'only CPU type' not in row[0]


def test_the_suites_time_per_file_table_holds_only_seconds():
  """tests/README.md's table of seconds per file: every cell but the file's name a number."""
  section = _read('tests/README.md').split('\n## Time per file\n')[1].split('\n## ')[0]
  rows = [[cell.strip() for cell in line.strip().strip('|').split('|')]
          for line in section.splitlines() if line.startswith('| ') and '---' not in line]
  assert len(rows) > 30 and rows[0][0] == 'file'
  prose = [row for row in rows[1:] if len(row) != 5
           or not all(re.fullmatch(r'(\*\*)?\d+(\*\*)?', cell) for cell in row[1:])]
  assert not prose, prose


def test_the_readme_is_a_short_guide_without_commit_hashes():
  """README.md: at most 20 KB (the detail lives in docs/), and no commit named in its prose
  (a seven-or-more-digit hexadecimal word holding a digit and a letter); links may name one."""
  text = _read('README.md')
  assert len(text.encode()) <= 20_000
  prose = LINK.sub('', text)
  hashes = [word for word in re.findall(r'\b[0-9a-f]{7,40}\b', prose)
            if re.search(r'\d', word) and re.search(r'[a-f]', word)]
  assert not hashes, hashes


# A repository path named in a page, a docstring or a comment: a script, config, result or folder.
REPO_PATH = re.compile(r'(?<![\w/.-])((?:experiments|configs|docs|tests|transformer_jax)/[\w./-]*'
                       r'[\w/])([*{<]?)')


@pytest.mark.parametrize('page', PAGES)
def test_the_paths_a_page_names_exist(page):
  """Each `experiments/...`, `configs/...`, `docs/...`, `tests/...` or `transformer_jax/...` path
  a page names (in its commands too: they work pasted into a fresh clone) exists; of a pattern
  (`*`, `{a,b}`, `<name>`), its folder."""
  assert not _missing_paths(page), f'{page} names paths that do not exist: {_missing_paths(page)}'


def _missing_paths(where: str) -> list[str]:
  missing = set()
  for path, pattern in REPO_PATH.findall(_prose_of(where)):
    if pattern:
      path = os.path.dirname(path)
    if not os.path.exists(os.path.join(REPO, path)):
      missing.add(path)
  return sorted(missing)


def test_the_paths_code_names_exist():
  """The same of every Python file of the package, the experiments and the configs: a folder
  or file its docstrings, comments and messages name is there."""
  code = sorted(os.path.relpath(path, REPO)
                for folder in ('transformer_jax', 'experiments', 'configs')
                for path in glob.glob(os.path.join(REPO, folder, '**', '*.py'), recursive=True))
  missing = {where: _missing_paths(where) for where in code}
  assert not {where: paths for where, paths in missing.items() if paths}


# A file named in a page, a docstring or a comment: a script, config, result or page.
FILE_NAME = re.compile(r'(?<![\w/.$<{*-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|jsonl|json|png|csv|txt|'
                       r'ipynb|toml|sh)(?:\.gz)?)\b')
# A folder named in a page, a docstring or a comment: a name ending in '/', in backticks.
FOLDER_NAME = re.compile(r'`((?:[\w.-]+/)+)`')
# Files the programs write (in a workdir, an export, an output folder) or a user's own, named
# by what they hold, not as files of this repository.
WRITTEN = {'config.json', 'metrics.jsonl', 'attention.json', 'dataset_info.json',
           'generation_config.json', 'vocab.json', 'sweep_group_results.json',
           'sweep_train_seconds.json', 'window.jsonl', 'table3_regularised.jsonl',
           'train_evaluate.json', 'sweep.json', 'result.json', 'processes.txt',
           'sitecustomize.py', 'source.txt', 'translations.txt', 'before.json', 'after.json',
           'curves.png', 'tokens/', 'tensorboard/'}
# Other projects' files: tensor2tensor's beam search and BLEU script, fairseq's generate.py,
# transformers' pipeline.
ELSEWHERE = {'beam_search.py', 'get_ende_bleu.sh', 'generate.py',
             'pipelines/text2text_generation.py'}
# Scripts since replaced, named where their figures are, with what replaced them.
REPLACED = {'decode_vs_torch.py': 'experiments/hf_export/check.py',
            'accelerator_figures.sh': 'experiments/gpu/device_window.py'}


def _named_files() -> list[str]:
  """The pages, and the Python files of the package, the experiments and the configs."""
  return PAGES + sorted(
      os.path.relpath(path, REPO) for folder in ('transformer_jax', 'experiments', 'configs')
      for path in glob.glob(os.path.join(REPO, folder, '**', '*.py'), recursive=True))


def _units(text: str) -> list[str]:
  """A text's paragraphs, list items and table rows (each line of a table is one)."""
  found = []
  for block in re.split(r'\n\s*\n', text):
    lines = block.split('\n')
    if all(line.lstrip().startswith('|') for line in lines if line.strip()):
      found += lines
    else:
      found.append(block)
  return found


def _folders_named(where: str, unit: str) -> list[str]:
  """The folders a unit of `where` names (its links' targets' folders, its `folder/`s, the
  folders of the paths it names), each from the page's folder, the root or the package: where
  a name beside them may live."""
  here = os.path.dirname(where)
  named = [os.path.dirname(os.path.normpath(os.path.join(here, target.partition('#')[0])))
           if not target.endswith('/') else os.path.normpath(os.path.join(here, target))
           for target in LINK.findall(unit) if not re.match(r'[a-z]+:', target)]
  named += [os.path.dirname(path) for path, _ in REPO_PATH.findall(unit)]
  for folder in FOLDER_NAME.findall(unit) + [path for path, _ in REPO_PATH.findall(unit)]:
    named += [os.path.normpath(os.path.join(base, folder))
              for base in (here, '', 'transformer_jax')]
  return [folder for folder in named if os.path.isdir(os.path.join(REPO, folder))]


def _resolves(name: str, where: str, unit: str) -> bool:
  """`name` is a file or folder from `where`'s folder, the root, the package, or a folder the
  same paragraph, list item or table row names; or a placeholder (FILE.py, OUT/x.json)."""
  bases = [os.path.dirname(where), '', 'transformer_jax', *_folders_named(where, unit)]
  if any(os.path.exists(os.path.join(REPO, base, name)) for base in bases):
    return True
  stem = name.split('/')[0] if '/' in name else name.split('.')[0]
  return stem.isupper() or stem in ('workdir', 'DIR')


def _prose_of(where: str) -> str:
  """What a reader reads of a file: a page whole; of Python, its comments and its strings that
  hold a space (docstrings, messages, flags' help), not the path parts that code joins."""
  text = _read(where)
  if not where.endswith('.py'):
    return text
  tokens = tokenize.generate_tokens(io.StringIO(text).readline)
  return '\n\n'.join(token.string for token in tokens if token.type == tokenize.COMMENT or (
      token.type == tokenize.STRING and ' ' in token.string))


def _unresolved(where: str) -> list[str]:
  missing = []
  for unit in _units(re.sub(r'\[`?[^\]`]*`?\]\(', '[](', _prose_of(where))):  # labels: below
    for name in FILE_NAME.findall(unit) + FOLDER_NAME.findall(unit):
      if (name in WRITTEN or name in ELSEWHERE or name in REPLACED
          or name.startswith(('http', 'www.')) or _resolves(name, where, unit)):
        continue
      missing.append(f'{where}: {name}')
  return missing


def test_names_resolve_where_they_are_named_not_anywhere():
  """`loop.py` in docs/ means no file there: a name resolves from its page's folder, the root,
  the package, or a folder its paragraph names; a file of that name elsewhere is not it."""
  assert _resolves('train_loop.py', 'docs/training.md', 'see `loop/`')
  assert _resolves('loop_cpu.json', 'README.md', '[speed/](experiments/speed/) `loop_cpu.json`')
  assert not _resolves('loop_cpu.json', 'README.md', 'the loop `loop_cpu.json`')
  assert not _resolves('train_loop.py', 'docs/training.md', 'the loop (`train_loop.py`)')
  assert _resolves('OUT/result.json', 'README.md', '') and not _resolves('variation/', 'docs/x.md',
                                                                          '')


def test_every_file_a_page_docstring_or_comment_names_exists():
  """No name that points nowhere: each file or folder name in a page or a Python file of the
  package, the experiments or the configs resolves (`_resolves`), unless it is one the programs
  write, another project's, or a script the page says was replaced."""
  missing = [name for where in _named_files() for name in _unresolved(where)]
  assert not missing, missing
  for script, replacement in REPLACED.items():
    assert not glob.glob(os.path.join(REPO, '**', script), recursive=True)
    assert os.path.exists(os.path.join(REPO, replacement))


def test_link_labels_name_the_file_they_link():
  """A link whose label is a file or folder name labels it with the linked path's name, or the
  end of its path (`[speed/loop_cpu.json](../experiments/speed/loop_cpu.json)`), or the folder
  of the page it links (`[rows/](rows/README.md)`)."""
  wrong = []
  for page in PAGES:
    for label, target in re.findall(r'\[`?([^\]`]+?)`?\]\(([^)\s#]+)(?:#[^)\s]*)?\)', _read(page)):
      if (FILE_NAME.fullmatch(label) or re.fullmatch(r'(?:[\w.-]+/)+', label)) and \
          not target.startswith('http'):
        linked = os.path.normpath(os.path.join(os.path.dirname(page), target))
        if label.endswith('/') and not os.path.isdir(os.path.join(REPO, linked)):
          linked = os.path.dirname(linked)  # a folder's page: [rows/](rows/README.md)
        label = label.rstrip('/')
        if not (linked == label or linked.endswith('/' + label)):
          wrong.append(f'{page}: [{label}]({target})')
  assert not wrong, wrong


def test_the_guides_in_docs_hold_no_dates():
  """docs/ are guides: a dated investigation lives with its experiment (experiments/*/README.md).
  A date in a file name or a link's target (a window's log, a note's heading) is no narrative."""
  dated = []
  for page in (p for p in PAGES if p.startswith('docs/')):
    text = re.sub(r'\]\([^)]*\)', '](', _read(page))
    dated += [f'{page}: {date}'
              for date in re.findall(r'(?<![\w/-])20\d\d-\d\d-\d\d(?![\w.])', text)]
  assert not dated, dated
