"""The documentation points at things that exist: every test that docs/faithfulness.md names
as a claim's check is a test function of that file, and every relative link of the Markdown
pages reaches a file, and a heading of it where the link names one (GitHub's anchors)."""

import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    os.path.relpath(path, REPO)
    for pattern in ('*.md', 'docs/*.md', 'experiments/*.md', 'experiments/results/*.md',
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
