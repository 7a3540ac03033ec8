"""The pages hold what a reader follows: every generated table (`experiments/tables.py`) is what
the committed result files give today, every relative link reaches its file and heading, every
path and file name a page or the code names exists where it is named, the tests
docs/faithfulness.md names exist, and the README's quick start holds the line CI runs. What the
pages say in prose is theirs: no figure is checked by pattern (tables carry the figures)."""

import functools
import glob
import io
import os
import re
import subprocess
import sys
import tokenize

import pytest

from transformer_jax.config import loading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    os.path.relpath(path, REPO)
    for pattern in ('*.md', 'docs/*.md', 'experiments/**/*.md', 'tests/*.md')
    for path in glob.glob(os.path.join(REPO, pattern), recursive=True))
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
# A link to a file of this repository on GitHub or opened from there in Colab (the README's
# "Open in Colab"): the path after the branch.
GITHUB = re.compile(r'https://(?:github\.com|colab\.research\.google\.com/github)/OWNER/'
                    r'transformer_jax/(?:blob|tree)/main/([^)#\s]+)')


def _read(path: str) -> str:
  with open(os.path.join(REPO, path), encoding='utf-8') as f:
    return f.read()


def _prose(text: str) -> str:
  """A page without its fenced code blocks, whose '#' lines and brackets are code."""
  return re.sub(r'^```.*?^```', '', _shown(text), flags=re.M | re.S)


def _shown(text: str) -> str:
  """A page without its HTML comments (the generated tables' markers), which no reader sees."""
  return re.sub(r'<!--.*?-->', '', text, flags=re.S)


def _anchor(heading: str) -> str:
  """GitHub's anchor of a heading: lowercased, punctuation but hyphens dropped, spaces -> '-'."""
  return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


def _anchors(text: str) -> set[str]:
  return {_anchor(line.lstrip('#')) for line in _prose(text).splitlines()
          if re.match(r'#{1,6} ', line)}


def test_anchors_follow_githubs_rule_and_code_is_not_prose():
  assert _anchor('On one GPU (NVIDIA H200)') == 'on-one-gpu-nvidia-h200'
  assert _anchor("The decoder's start vector: learned") == 'the-decoders-start-vector-learned'
  page = '# Title\n```bash\n# a comment\n```\ntext [a](b)\n'
  assert _anchors(page) == {'title'} and LINK.findall(_prose(page)) == ['b']


def test_the_pages_are_found():
  assert {'README.md', 'docs/performance.md', 'experiments/README.md',
          'experiments/multi30k/README.md', 'tests/README.md'} <= set(PAGES)


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


@functools.cache
def generated() -> dict[str, tuple[str, str]]:
  """{page: (as committed, with its tables written anew)}, written into memory."""
  return tables().pages()


@pytest.mark.parametrize('page', sorted(generated()))
def test_the_generated_tables_are_current(page):
  """A figure is read from its file: a table that differs from what its files give now (a new
  result, a figure typed by hand) fails until `python experiments/tables.py` rewrites it."""
  committed, written = generated()[page]
  assert committed == written, f'{page}: run `python experiments/tables.py` and commit'


def test_every_table_is_on_a_page():
  placed = [name for committed, _ in generated().values()
            for name in re.findall(r'<!-- tables\.py: ([\w-]+) -->', committed)]
  assert sorted(placed) == sorted(tables().TABLES)  # each once
  assert {'README.md', 'docs/performance.md'} <= set(generated())


def test_the_readme_holds_the_quick_start_ci_runs():
  """.ci/run runs README.md's first line that installs and runs pytest (`^pip install .*pytest`):
  a line of the quick start's code block that runs the whole suite. The README stays a landing
  page, 10 KiB at most: the detail lives in docs/ and the experiments' pages."""
  readme = _read('README.md')
  line = re.search(r'^pip install .*pytest.*$', readme, re.M).group(0)
  block = re.search(r'## Quickstart\n.*?```bash\n(.*?)```', readme, re.S).group(1)
  assert line in block.splitlines() and re.search(r'python -m pytest .*\btests$', line), line
  assert len(readme.encode()) <= 10_240


def test_the_sweep_of_your_own_runs_to_the_plan_its_page_shows(tmp_path):
  """docs/training.md's sweep file of a user's own rows, saved where it says, run with its
  command (`--dry_run`, the workdir moved to a temporary one): it prints the rows' changes and
  the plan the page shows, line for line, and writes nothing."""
  page = _read('docs/training.md')
  section = page[page.index('### A sweep of your own'):page.index('## WMT 2014')]
  code, command, printed = re.findall(r'^```\w*\n(.*?)^```', section, re.M | re.S)[:3]
  file = re.search(r'--sweep=(\S+)', command).group(1)
  (tmp_path / file).write_text(code)
  for folder in ('configs', 'experiments'):  # where a fork keeps them, beside the file
    (tmp_path / folder).symlink_to(os.path.join(REPO, folder))
  argv = re.sub(r'--workdir=\S+', f'--workdir={tmp_path / "work"}',
                command.replace('\\\n', ' ')).split()
  assert argv[:3] == ['python', '-m', 'transformer_jax.sweep'], argv
  result = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stdout.splitlines() == printed.splitlines()
  assert not (tmp_path / 'work').exists()


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
    on_github = GITHUB.match(target)
    if on_github:
      target = os.path.relpath(os.path.join(REPO, on_github.group(1)),
                               os.path.join(REPO, os.path.dirname(page)))
    elif re.match(r'[a-z]+:', target):  # https:, mailto:
      continue
    path, _, anchor = target.partition('#')
    path = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
    if not os.path.exists(os.path.join(REPO, path)):
      broken.append(target)
    elif anchor and path.endswith('.md') and anchor not in _anchors(_read(path)):
      broken.append(target)
  assert not broken, f'{page}: links that reach nothing: {broken}'


def test_the_guides_in_docs_hold_no_dates():
  """docs/ are guides: a dated investigation lives with its experiment (experiments/*/README.md).
  A date in a file name or a link's target (a window's log, a note's heading) is no narrative."""
  dated = []
  for page in (p for p in PAGES if p.startswith('docs/')):
    text = re.sub(r'\]\([^)]*\)', '](', _read(page))
    dated += [f'{page}: {date}'
              for date in re.findall(r'(?<![\w/-])20\d\d-\d\d-\d\d(?![\w.])', text)]
  assert not dated, dated


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
           'curves.png', 'tokens/', 'tensorboard/', 'prepared.json', 'heads_dropout.py'}
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
    return _shown(text)
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

