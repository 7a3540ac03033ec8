"""The documentation points at things that exist: every test that docs/faithfulness.md names
as a claim's check is a test function of that file, and every relative link of the Markdown
pages reaches a file, and a heading of it where the link names one (GitHub's anchors)."""

import glob
import json
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    os.path.relpath(path, REPO)
    for pattern in ('*.md', 'docs/*.md', 'experiments/*.md', 'experiments/results/*.md',
                    'experiments/results/notes/*.md',
                    'tests/*.md')
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
          'experiments/results/multi30k.md', 'tests/README.md'} <= set(PAGES)


def test_faithfulness_names_tests_that_exist():
  cited = []
  for row in _read('docs/faithfulness.md').splitlines():
    # `test_x.py::name`, then `::other` for more tests of the same file.
    module = None
    for match in re.finditer(r'`(test_\w+\.py)?::(\w+)', row):
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
# backticks (stripped first), with its unit; 'min', 'ms', '%' compare scaled.
FIGURE = re.compile(r'(?<![\w.§])(\d+(?:\.\d+)?)(%| ?ms\b| ?min\b)?(?![\w.])')
_SCALES = {None: (1,), '%': (1, 100), 'ms': (1000,), 'min': (1 / 60,)}


def _numbers(path: str) -> list[float]:
  """Every number of a committed file: the values of JSON / JSONL, the numbers of text."""
  text = _read(path)
  if not path.endswith(('.json', '.jsonl')):
    return [float(x) for x in re.findall(r'\d+(?:\.\d+)?', text)]
  found = []

  def walk(value):
    if isinstance(value, dict):
      value = list(value.values())
    if isinstance(value, list):
      for item in value:
        walk(item)
    elif isinstance(value, str):
      found.extend(float(x) for x in re.findall(r'\d+(?:\.\d+)?', value))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
      found.append(float(value))

  for line in (text.splitlines() if path.endswith('.jsonl') else [text]):
    if line.strip():
      walk(json.loads(line))
  return found


def _occurs(figure: str, unit: str | None, numbers: list[float]) -> bool:
  """Whether some number, in the figure's unit, is the figure at the figure's precision."""
  decimals = len(figure.partition('.')[2])
  unit = unit.strip() if unit else None
  return any(f'{x * scale:.{decimals}f}' == figure for x in numbers for scale in _SCALES[unit])


def test_figure_matching():
  assert _occurs('37.4', 'ms', [0.037362]) and not _occurs('37.4', None, [0.037362])
  assert _occurs('30.1', '%', [0.30105]) and _occurs('51', '%', [51.2])
  assert _occurs('5.2', 'min', [313.3]) and not _occurs('1.22', None, [1.2149, 1.2251])
  assert [m.group(1) for m in FIGURE.finditer('§3.1 test2016 1.22× 72 M, 4.5M (N 3)')] == [
      '1.22', '72', '3']


def _results_rows() -> list[list[str]]:
  section = _read('README.md').split('\n## Results\n')[1].split('\n## ')[0]
  rows = [line.strip('|').split(' | ') for line in section.splitlines()
          if line.startswith('| ') and not line.startswith('| result |')]
  assert len(rows) >= 10 and all(len(row) == 4 for row in rows)
  return rows


@pytest.mark.parametrize('row', _results_rows(), ids=lambda row: row[0][:40])
def test_readme_figures_occur_in_a_file_the_row_links(row):
  """Each figure of the headline column is in a committed file under experiments/results/ that
  its row links to (the JSON a script wrote, or the results page that derived it)."""
  sources = [os.path.normpath(target.partition('#')[0]) for target in LINK.findall(' '.join(row))
             if target.startswith('experiments/results/')]
  files = [path for source in sources
           for path in ([source] if os.path.isfile(os.path.join(REPO, source)) else
                        sorted(os.path.relpath(p, REPO) for p in glob.glob(
                            os.path.join(REPO, source, '*.json'))))]
  assert files, f'{row[0]}: the row links no committed result'
  numbers = [x for path in files for x in _numbers(path)]
  figures = FIGURE.findall(re.sub(r'`[^`]*`', '', row[1]))
  assert figures
  missing = [figure + (unit or '') for figure, unit in figures
             if not _occurs(figure, unit, numbers)]
  assert not missing, f'{row[0]}: {missing} occur in none of {files}'
