"""One flag vocabulary: every flag of every command (`python -m transformer_jax.<command>`) and
experiment script has one name for one meaning (FLAGS), a name a command used to take fails
naming the new one (`cli.renamed`), every command line a page shows (read whole, across line
breaks) names a script that exists and only flags it takes, with values of their types and
choices and config overrides its config starts with (read from the source, nothing run), and
every `--flag` the pages and the code name is one of them."""

import ast
import functools
import glob
import os
import re
import subprocess
import sys

import pytest

from transformer_jax.config import checks, fields, loading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every flag name, its meaning, and the absl kinds it may be defined as. A new flag takes a
# name here; a name means the same in every command and script that defines it.
FLAGS = {
    'all_rows': ('summarise every row of a sweep file', {'bool'}),
    'alpha': ('the length penalty α of beam search (§6.1)', {'float'}),
    'average_last': ('how many of the latest checkpoints are averaged (§6.1)', {'integer'}),
    'batch_size': ('sentences (or rows) in a batch', {'integer'}),
    'batches': ('how many batches are measured', {'integer'}),
    'beam_size': ('the beam size; 1 is greedy', {'integer'}),
    'beam_sizes': ('the beam sizes compared', {'list'}),
    'before': ('a checkout of the commit compared with', {'string'}),
    'benchmark_steps': ('steps the benchmark times', {'integer'}),
    'budgets': ('step budgets compared', {'list'}),
    'code': ('what the measured code is, for the result file', {'string'}),
    'compare': ('compare two result files instead of measuring', {'bool'}),
    'compile': ('also time torch.compile', {'bool'}),
    'concurrent': ('removed from the sweep: an error naming --together', {'integer'}),
    'config': ('a config file (with its --config.FIELD=VALUE overrides)',
               {'config_file', 'config_dict', 'string'}),
    'cpu_torch': ('the PyTorch CPU wheel index', {'string'}),
    'curves': ('row files whose dev curves are read', {'multi_string'}),
    'devices': ('the devices a batch is split over', {'integer'}),
    'devices_per_group': ('the devices each of a sweep\'s groups trains on, side by side',
                          {'integer'}),
    'dry_run': ('a sweep checked and planned, its plan printed; nothing trained or written',
                {'bool'}),
    'dtype': ('the compute dtype', {'enum'}),
    'epochs': ('epoch boundaries crossed while timing', {'integer'}),
    'input': ('the file read (default: stdin)', {'string'}),
    'inputs': ('internal: the pickled inputs a child process of a benchmark reads', {'string'}),
    'inspect': ('print the data pipeline\'s statistics', {'bool'}),
    'json': ('a switch: the figures as JSON', {'bool', 'boolean'}),
    'k': ('the loop\'s train.steps_per_call', {'integer'}),
    'kinds': ('what is timed', {'list'}),
    'ks': ('the train.steps_per_call values timed', {'list'}),
    'label': ('what was run, recorded in the result', {'string'}),
    'leave_out': ('rows left out', {'list'}),
    'length': ('tokens in a sequence', {'integer'}),
    'log': ('a log file read', {'string'}),
    'manual_dir': ('a directory of a dataset\'s raw files (config.data.manual_dir)', {'string'}),
    'median': ('the median source length, in tokens', {'float'}),
    'output': ('the path written: a file or a directory', {'string'}),
    'prepare': ('prepare a config\'s data once into --output, for config.data.prepared',
                {'bool'}),
    'process_count': ('the processes that share a sweep, or each batch', {'integer'}),
    'process_index': ('this process\'s share of a sweep, or of each batch', {'integer'}),
    'output_ids': ('the file the output ids are written to', {'string'}),
    'override': ('FIELD=VALUE, set in every run', {'multi_string'}),
    'overwrite': ('replace --output if it exists', {'bool'}),
    'pack_length': ('the packed sequences\' length (data.pack_length)', {'integer'}),
    'pack_lengths': ('the data.pack_length values compared', {'list'}),
    'packed': ('sequences packed with segment ids', {'bool'}),
    'pairs': ('training pairs generated', {'integer'}),
    'parts': ('the parts run, in order', {'list'}),
    'platform': ('the platform whose defaults resolve a config: cpu, gpu or tpu', {'enum'}),
    'plot': ('the picture drawn', {'string'}),
    'rehearse': ('every part at a tiny size, as a rehearsal', {'bool'}),
    'results': ('a sweep\'s folder of row JSON files', {'string'}),
    'rounds': ('how many times each variant is timed', {'integer'}),
    'rows': ('rows of a sweep file', {'list'}),
    'scratch': ('a directory for temporary files', {'string'}),
    'settings': ('the settings run', {'list'}),
    'shapes': ('the model shapes timed', {'string'}),
    'side': ('internal: which side of a comparison a child process runs', {'enum'}),
    'sizes': ('corpus sizes', {'list'}),
    'source': ('a source sentence', {'string'}),
    'split': ('a dataset split', {'enum', 'string'}),
    'steps': ('steps run', {'integer'}),
    'stop_after_minutes': ('the deadline, in minutes from the start', {'float'}),
    'sweep': ('a sweep file', {'string'}),
    'target': ('a target sentence', {'string'}),
    'threads': ('the cores each side of a comparison is pinned to', {'list'}),
    'together': ('rows trained as one program', {'integer'}),
    'token': ('a word piece', {'string'}),
    'tokens_per_batch': ('tokens in a batch (data.tokens_per_batch)', {'integer'}),
    'top': ('how many are listed', {'integer'}),
    'torch_only': ('internal: the child process that times PyTorch', {'bool'}),
    'trace_dir': ('where the profiler\'s trace goes', {'string'}),
    'uncached': ('also time the decoder without its key/value cache', {'bool'}),
    'until': ('the step timed to', {'integer'}),
    'wall_seconds': ('a whole command\'s wall time', {'float'}),
    'warmup': ('steps not timed', {'integer'}),
    'workdir': ('a training run\'s directory (several, where a script overlays them)',
                {'string', 'list'}),
}
# Flags absl defines for every program.
ABSL = {'help', 'helpfull', 'helpshort', 'helpxml', 'verbosity', 'v', 'logtostderr',
        'alsologtostderr', 'flagfile', 'undefok'}


# Other programs' flags that pages, docstrings and comments name, by program; XLA's flags are
# those named `--xla_...`.
OTHER_PROGRAMS = {
    'pytest': {'durations'},
    'pip': {'index-url', 'extra-index-url', 'no-cache-dir', 'no-compile', 'no-deps', 'no-index',
            'upgrade', 'python'},
    'git': {'porcelain', 'show-toplevel', 'untracked-files'},
    'SLURM\'s srun': {'ntasks', 'ntasks-per-node'},
    'CTranslate2\'s ct2-transformers-converter': {'model', 'output_dir'},
    'fairseq': {'lenpen', 'num-epoch-checkpoints', 'patience'},
    'sacrebleu': {'tokenize'},
    'gcloud': {'location', 'zone', 'worker', 'command', 'accelerator-type', 'version'},
    'tests/test_layers.py': {'write'},
}
# Flags of scripts since replaced (tests/test_pages.py's REPLACED), named where their figures are.
REPLACED_SCRIPTS = {'repeats': 'decode_vs_torch.py'}


def _programs() -> list[str]:
  """Every module that defines flags: the package's and the experiments' scripts."""
  return sorted(path for pattern in ('transformer_jax/**/*.py', 'experiments/**/*.py')
                for path in glob.glob(os.path.join(REPO, pattern), recursive=True)
                if 'flags.DEFINE' in open(path, encoding='utf-8').read()
                or 'renamed(' in open(path, encoding='utf-8').read())


@functools.cache
def _defined(path: str) -> tuple[dict[str, str], dict[str, str], bool, dict[str, list[str]]]:
  """({flag: absl kind}, {old name: new name} of `cli.renamed`, whether it defines the
  translator's flags, {enum flag: its choices}) of a module, read from its source."""
  real, renamed, translator, choices = {}, {}, False, {}
  for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
    if not isinstance(node, ast.Call):
      continue
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, 'id', '')
    literal = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
               for a in node.args]
    if name.startswith('DEFINE_') and literal and literal[0]:
      real[literal[0]] = name[len('DEFINE_'):]
      if name == 'DEFINE_enum':
        choices[literal[0]] = ast.literal_eval(node.args[2])
    elif name == 'renamed' and len(literal) >= 2 and literal[0] and literal[1]:
      renamed[literal[0]] = literal[1]
    elif name == 'define_translator_flags':
      translator = True
  return real, renamed, translator, choices


def test_every_flag_has_one_name_and_meaning_across_commands_and_scripts():
  defined = {}
  for path in _programs():
    real, renamed, _, _ = _defined(path)
    where = os.path.relpath(path, REPO)
    for name, kind in real.items():
      assert name in FLAGS, f'{where}: --{name} is in no row of FLAGS: name its meaning there'
      assert kind in FLAGS[name][1], f'{where}: --{name} is a {kind}, elsewhere {FLAGS[name][1]}'
      defined.setdefault(name, []).append(where)
    for old, new in renamed.items():
      assert new in real, f'{where}: --{old} renamed --{new}, which it does not define'
  assert set(defined) == set(FLAGS), f'FLAGS rows no program defines: {set(FLAGS) - set(defined)}'
  # One parser: absl everywhere.
  assert _argparse_imports(glob.glob(os.path.join(REPO, '**', '*.py'), recursive=True)) == []


def _argparse_imports(paths: list[str]) -> list[str]:
  """The files that import argparse, in any form (`import argparse as ap`, `from argparse
  import ...`, inside a function)."""
  found = []
  for path in paths:
    for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
      names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
               else [node.module] if isinstance(node, ast.ImportFrom) else [])
      if any(name and name.split('.')[0] == 'argparse' for name in names):
        found.append(os.path.relpath(path, REPO))
        break
  return found


def _texts() -> list[str]:
  """The pages, and every Python file of the package, the experiments and the configs (their
  docstrings and comments name flags too)."""
  return sorted(os.path.relpath(path, REPO) for pattern in (
      '*.md', 'docs/*.md', 'tests/*.md', 'experiments/**/*.md', 'transformer_jax/**/*.py',
      'experiments/**/*.py', 'configs/*.py') for path in glob.glob(os.path.join(REPO, pattern),
                                                                    recursive=True))


def test_every_flag_a_page_docstring_or_comment_names_is_one_that_exists():
  """A `--name` anywhere in the pages or the code is a flag of FLAGS (or `--noNAME` of a switch,
  `--config.FIELD`), absl's, a name a command used to take (`cli.renamed`: it fails naming the
  new one), another program's (OTHER_PROGRAMS, `--xla_...`), a replaced script's, or a
  placeholder (`--NAME`): a renamed flag leaves no stale name in prose."""
  renamed = {old for path in _programs() for old in _defined(path)[1]}
  switches = {name for name, (_, kinds) in FLAGS.items() if kinds & {'bool', 'boolean'}}
  others = set().union(*OTHER_PROGRAMS.values())
  stale = []
  for where in _texts():
    for name in re.findall(r'(?<![\w-])--([A-Za-z][\w.-]*\w)', _read(where)):
      if not (name in FLAGS or name in ABSL or name in renamed or name in others
              or name in REPLACED_SCRIPTS or name.startswith(('config.', 'xla_')) or name.isupper()
              or (name.startswith('no') and name[2:] in switches)):
        stale.append(f'{where}: --{name}')
  assert not stale, stale


def _read(path: str) -> str:
  with open(os.path.join(REPO, path), encoding='utf-8') as f:
    return f.read()


def test_every_form_of_an_argparse_import_is_found(tmp_path):
  forms = ['import argparse', 'import os, argparse as ap', 'from argparse import ArgumentParser',
           'def main():\n  import argparse']
  for i, form in enumerate(forms):
    (tmp_path / f'{i}.py').write_text(form + '\n')
  (tmp_path / 'clean.py').write_text("text = 'import argparse'  # not an import\n")
  found = _argparse_imports(sorted(str(path) for path in tmp_path.iterdir()))
  assert sorted(os.path.basename(path) for path in found) == [f'{i}.py' for i in range(4)]


@pytest.mark.slow
@pytest.mark.parametrize('command, old, new', [
    (['-m', 'transformer_jax.average', '--workdir=/nonexistent', '--last=2', '--output=/tmp/x'],
     'last', 'average_last'),
    (['-m', 'transformer_jax.export', '--workdir=/nonexistent', '--out=/tmp/x'], 'out', 'output'),
    (['experiments/speed/packing.py', '--json=/tmp/x.json'], 'json', 'output'),
])
def test_an_old_flag_name_fails_naming_the_new_one(command, old, new):
  result = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True)
  assert result.returncode != 0
  assert f'--{old} was renamed --{new}' in result.stderr, result.stderr[-2000:]


# A command line in a page: the program, then its flags (placeholders in brackets allowed); a
# line break anywhere between them, in prose as in a shell's continued line, is a space.
_COMMAND = re.compile(r'python3?\s+(-m\s+transformer_jax(?:\.\w+)+|experiments/[\w/]+\.py)'
                      r'((?:\s+\[?--[\w.]+(?:=(?:"[^"]*"|\'[^\']*\'|[^\s`\]|;&)]*))?\]?)*)')
_FLAG = re.compile(r'--([\w.]+)(?:=("[^"]*"|\'[^\']*\'|[^\s`\]|;&)]*))?')
# A value that stands for one (DIR, N, $N, <file>, ${SEED}): its type is the reader's to give.
_PLACEHOLDER = re.compile(r'[A-Z][A-Z0-9_]*|.*\$.*|.*<[^>]*>.*|\.\.\.')
_BOOLEAN = {'true', 'false', 't', 'f', '1', '0'}


def _commands(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
  """(program, [(flag, value)]) of each command line in a page, continuation lines joined."""
  text = re.sub(r'\\\n\s*', ' ', text)
  return [(re.sub(r'\s+', ' ', program), [(name, value.strip('"\'')) for name, value in
                                         _FLAG.findall(arguments)])
          for program, arguments in _COMMAND.findall(text)]


def test_commands_broken_across_lines_are_read_whole():
  page = ('run `python -m\ntransformer_jax.evaluate --workdir=DIR\n--split=test` and\n'
          '```\npython experiments/speed/loop.py \\\n    --ks=8 --rounds="4"\n```\n')
  assert _commands(page) == [
      ('-m transformer_jax.evaluate', [('workdir', 'DIR'), ('split', 'test')]),
      ('experiments/speed/loop.py', [('ks', '8'), ('rounds', '4')])]


def _module(program: str) -> str:
  if program.startswith('-m '):
    parts = program[3:].split('.')
    path = os.path.join(REPO, *parts) + '.py'
    return path if os.path.exists(path) else os.path.join(REPO, *parts, '__main__.py')
  return os.path.join(REPO, program)


def _pages() -> list[str]:
  """README.md, docs/ and the experiments' and tests' pages."""
  return [os.path.join(REPO, 'README.md')] + sorted(
      path for pattern in ('docs/*.md', 'experiments/**/*.md', 'tests/*.md')
      for path in glob.glob(os.path.join(REPO, pattern), recursive=True))


def test_the_pages_name_commands():
  found = [c for page in _pages() for c in _commands(open(page, encoding='utf-8').read())]
  assert len(found) >= 60 and {p for p, _ in found} >= {
      '-m transformer_jax.train', '-m transformer_jax.evaluate', '-m transformer_jax.sweep',
      'experiments/speed/torch_baseline.py'}


def _value_problem(name: str, kind: str, value: str, choices: list[str] | None) -> str | None:
  """Why `value` is no value of flag `name`, an absl `kind` (with an enum's `choices`)."""
  if not value:
    return None if kind in ('bool', 'boolean') else f'--{name} without its value'
  if _PLACEHOLDER.fullmatch(value):
    return None
  try:
    {'integer': int, 'float': float}.get(kind, str)(value)
  except ValueError:
    return f'--{name}={value}: not a {kind}'
  if kind in ('bool', 'boolean') and value.lower() not in _BOOLEAN:
    return f'--{name}={value}: not a switch\'s value'
  if choices is not None and value not in choices:
    return f'--{name}={value}: not one of {choices}'
  return None


def _config_problem(config: str, overrides: list[str]) -> str | None:
  """Why `--config=config` with these `--config.FIELD=VALUE` overrides would not start: a field
  it lacks, a value its type does not parse, a value its checks refuse (`checks.validate`)."""
  spec = os.path.join(REPO, config)
  if not os.path.exists(spec.partition(':')[0]) or re.fullmatch(r'[A-Z]{3,}|<[^>]*>',
                                                                spec.partition(':')[2]):
    return None  # a placeholder (configs/<file>.py, sweep.py:ROW), or a path of the reader's
  given = [o for o in overrides if not o.split('=', 1)[0].isupper()]
  typed = [o for o in given if not _PLACEHOLDER.fullmatch(o.partition('=')[2])]
  try:
    config_dict = loading.from_file(spec)
    unknown = fields.unknown_override(['', *(f'--config.{o}' for o in given)], config_dict)
    if unknown:
      return unknown
    checks.validate(fields.overridden(config_dict, typed))
  except ValueError as e:
    return f'--config={config}: {e}'
  return None


def test_a_wrong_value_type_or_choice_is_found():
  assert _value_problem('split', 'enum', 'dev', ['train', 'validation', 'test'])
  assert _value_problem('split', 'enum', 'test', ['train', 'validation', 'test']) is None
  assert _value_problem('steps', 'integer', '1e3', None)
  assert _value_problem('steps', 'integer', 'N', None) is None
  assert _value_problem('json', 'bool', 'yes', None)
  assert _value_problem('steps', 'integer', '', None)
  assert _config_problem('configs/table3.py:C2', ['train.num_train_steps=ten'])
  assert _config_problem('configs/multi30k.py', ['model.d_model=N', 'data.dataset=wmt'])
  assert _config_problem('configs/table3.py:C2', ['model.no_such_field=1'])
  assert _config_problem('configs/tiny.py', ['seed=$N', 'train.loss_chunk=2']) is None


@pytest.mark.parametrize('page', [os.path.relpath(p, REPO) for p in _pages()])
def test_every_command_line_of_a_page_parses_against_its_programs_flags(page):
  """A moved script, a renamed flag or a wrong value in a page fails here: each command's
  program exists, each flag is one it defines (absl's own, `--noNAME` of a switch) with a value
  of its type (an enum's: one of its choices), its `--config.FIELD=VALUE` overrides start the
  config it names (a file or `file.py:row`) and `--override=FIELD=VALUE` configs/base.py."""
  base = os.path.join('configs', 'base.py')
  translator_flags, _, _, translator_choices = _defined(
      os.path.join(REPO, 'transformer_jax', 'decoding', 'translator.py'))
  problems = []
  for program, flags_given in _commands(open(os.path.join(REPO, page), encoding='utf-8').read()):
    path = _module(program)
    if not os.path.exists(path):
      problems.append(f'{program}: no such program')
      continue
    real, _, translator, choices = _defined(path)
    known = {**real, **(translator_flags if translator else {})}
    choices = {**choices, **(translator_choices if translator else {})}
    config = next((value for name, value in flags_given if name == 'config'), None)
    overrides = [f'{name[len("config."):]}={value}' for name, value in flags_given
                 if name.startswith('config.')]
    if config and overrides:
      problems.append(_config_problem(config, overrides))
    for name, value in flags_given:
      if name.startswith('config.'):
        continue
      if name == 'override' and '=' in value and value[0].isalpha():
        problems.append(_config_problem(base, [value]))
      bare = name[2:] if name.startswith('no') and known.get(name[2:]) in ('bool', 'boolean') \
          else name
      if bare not in known and bare not in ABSL:
        problems.append(f'{program}: no flag --{name}')
      elif bare in known:
        problems.append(_value_problem(name, known[bare] if bare == name else 'bool',
                                       value if bare == name else 'true', choices.get(bare)))
  problems = [problem for problem in problems if problem]
  assert problems == [], f'{page}: {problems}'
