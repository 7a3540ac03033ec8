"""The pages hold what a reader follows: every generated table (`experiments/tables.py`) is what
the committed result files give today, every relative link reaches its file and heading, every
path and file name a page or the code names exists where it is named, the tests
docs/faithfulness.md names exist, and the README's quick start holds the line CI runs. What the
pages say in prose is theirs: no figure is checked by pattern (tables carry the figures)."""

import functools
import os
import re

import pytest

from transformer_jax.config import loading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def tables():
  return loading.load_module(os.path.join(REPO, 'experiments', 'tables.py'))


def test_a_table_is_written_between_its_markers_and_nowhere_else(monkeypatch):
  monkeypatch.setattr(tables(), 'TABLES', {'t': lambda page: f'| {page} |\n'})
  page = ('# P\n\nkept | 1 |\n\n<!-- tables.py: t -->\n| stale |\n<!-- /tables.py -->\n\n'
          'kept too\n')
  assert tables().render('docs/p.md', page) == (
      '# P\n\nkept | 1 |\n\n<!-- tables.py: t -->\n\n| docs/p.md |\n\n<!-- /tables.py -->\n\n'
      'kept too\n')
  with pytest.raises(ValueError, match='no table named'):
    tables().render('docs/p.md', '<!-- tables.py: nope -->\n<!-- /tables.py -->')


def test_a_table_reads_only_result_files_under_experiments():
  with pytest.raises(AssertionError):
    tables().load('README.md')
  assert tables().span([1.2149, 1.17], 2, '×') == '1.17–1.21×'
  assert tables().span([0.9953, 1.0], 2) == '1.00'


@pytest.mark.parametrize('page', sorted(tables().pages()))
def test_the_generated_tables_are_current(page):
  """A figure is read from its file: a table that differs from what its files give now (a new
  result, a figure typed by hand) fails until `python experiments/tables.py` rewrites it."""
  committed, generated = tables().pages()[page]
  assert committed == generated, f'{page}: run `python experiments/tables.py` and commit'
