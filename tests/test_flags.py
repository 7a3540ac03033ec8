"""One flag vocabulary: every flag of every command (`python -m transformer_jax.<command>`) and
experiment script has one name for one meaning (FLAGS), a name a command used to take fails
naming the new one (`cli.renamed`), and every command line in README.md and docs/ names a
script that exists and only flags it takes (read from the source, nothing run)."""

import ast
import functools
import glob
import os
import re
import subprocess
import sys

import pytest

from transformer_jax.config import fields, loading

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
    'compare': ('compare two result files instead of measuring', {'bool'}),
    'compile': ('also time torch.compile', {'bool'}),
    'concurrent': ('removed from the sweep: an error naming --together', {'integer'}),
    'config': ('a config file (with its --config.FIELD=VALUE overrides)',
               {'config_file', 'config_dict', 'string'}),
    'cpu_torch': ('the PyTorch CPU wheel index', {'string'}),
    'curves': ('row files whose dev curves are read', {'multi_string'}),
    'devices_per_group': ('the devices each of a sweep\'s groups trains on, side by side',
                          {'integer'}),
    'dtype': ('the compute dtype', {'enum'}),
    'input': ('the file read (default: stdin)', {'string'}),
    'inspect': ('print the data pipeline\'s statistics', {'bool'}),
    'json': ('a switch: the figures as JSON', {'bool', 'boolean'}),
    'k': ('the loop\'s train.steps_per_call', {'integer'}),
    'kinds': ('what is timed', {'list'}),
    'ks': ('the train.steps_per_call values timed', {'list'}),
    'label': ('what was run, recorded in the result', {'string'}),
    'leave_out': ('rows left out', {'list'}),
    'length': ('tokens in a row', {'integer'}),
    'log': ('a log file read', {'string'}),
    'manual_dir': ('a directory of a dataset\'s raw files (config.data.manual_dir)', {'string'}),
    'median': ('the median source length, in tokens', {'float'}),
    'output': ('the path written: a file or a directory', {'string'}),
    'process_count': ('the processes that share a sweep', {'integer'}),
    'process_index': ('this process\'s share of a sweep', {'integer'}),
    'output_ids': ('the file the output ids are written to', {'string'}),
    'override': ('FIELD=VALUE, set in every run', {'multi_string'}),
    'overwrite': ('replace --output if it exists', {'bool'}),
    'pack_length': ('the packed rows\' length (data.pack_length)', {'integer'}),
    'pack_lengths': ('the data.pack_length values compared', {'list'}),
    'packed': ('rows packed with segment ids', {'bool'}),
    'pairs': ('training pairs generated', {'integer'}),
    'parts': ('the parts run, in order', {'list'}),
    'plot': ('the picture drawn', {'string'}),
    'rehearse': ('every part at a tiny size, as a rehearsal', {'bool'}),
    'results': ('a sweep\'s folder of row JSON files', {'string'}),
    'rounds': ('how many times each variant is timed', {'integer'}),
    'rows': ('rows of a sweep file', {'list'}),
    'scratch': ('a directory for temporary files', {'string'}),
    'settings': ('the settings run', {'list'}),
    'shapes': ('the model shapes timed', {'string'}),
    'sizes': ('corpus sizes', {'list'}),
    'source': ('a source sentence', {'string'}),
    'split': ('a dataset split', {'enum', 'string'}),
    'steps': ('steps run', {'integer'}),
    'stop_after_minutes': ('the deadline, in minutes from the start', {'float'}),
    'sweep': ('a sweep file', {'string'}),
    'target': ('a target sentence', {'string'}),
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


def _programs() -> list[str]:
  """Every module that defines flags: the package's and the experiments' scripts."""
  return sorted(path for pattern in ('transformer_jax/**/*.py', 'experiments/**/*.py')
                for path in glob.glob(os.path.join(REPO, pattern), recursive=True)
                if 'flags.DEFINE' in open(path, encoding='utf-8').read()
                or 'renamed(' in open(path, encoding='utf-8').read())


@functools.cache
def _defined(path: str) -> tuple[dict[str, str], dict[str, str], bool]:
  """({flag: absl kind}, {old name: new name} of `cli.renamed`, whether it defines the
  translator's flags) of a module, read from its source."""
  real, renamed, translator = {}, {}, False
  for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
    if not isinstance(node, ast.Call):
      continue
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, 'id', '')
    literal = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
               for a in node.args]
    if name.startswith('DEFINE_') and literal and literal[0]:
      real[literal[0]] = name[len('DEFINE_'):]
    elif name == 'renamed' and len(literal) >= 2 and literal[0] and literal[1]:
      renamed[literal[0]] = literal[1]
    elif name == 'define_translator_flags':
      translator = True
  return real, renamed, translator


def test_every_flag_has_one_name_and_meaning_across_commands_and_scripts():
  defined = {}
  for path in _programs():
    real, renamed, _ = _defined(path)
    where = os.path.relpath(path, REPO)
    for name, kind in real.items():
      assert name in FLAGS, f'{where}: --{name} is in no row of FLAGS: name its meaning there'
      assert kind in FLAGS[name][1], f'{where}: --{name} is a {kind}, elsewhere {FLAGS[name][1]}'
      defined.setdefault(name, []).append(where)
    for old, new in renamed.items():
      assert new in real, f'{where}: --{old} renamed --{new}, which it does not define'
  assert set(defined) == set(FLAGS), f'FLAGS rows no program defines: {set(FLAGS) - set(defined)}'
  # One parser: absl everywhere.
  parsers = [os.path.relpath(path, REPO) for path in glob.glob(
      os.path.join(REPO, '**', '*.py'), recursive=True)
             if re.search(r'^import argparse', open(path, encoding='utf-8').read(), re.M)]
  assert parsers == []


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


# A command line in a page: the program, then its flags (placeholders in brackets allowed).
_COMMAND = re.compile(r'python3? (-m transformer_jax(?:\.\w+)+|experiments/[\w/]+\.py)'
                      r'((?:\s+\[?--[\w.]+(?:=(?:"[^"]*"|\'[^\']*\'|[^\s`\]|;&)]*))?\]?)*)')
_FLAG = re.compile(r'--([\w.]+)(?:=("[^"]*"|\'[^\']*\'|[^\s`\]|;&)]*))?')


def _commands(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
  """(program, [(flag, value)]) of each command line in a page, continuation lines joined."""
  text = re.sub(r'\\\n\s*', ' ', text)
  return [(program, _FLAG.findall(arguments)) for program, arguments in _COMMAND.findall(text)]


def _module(program: str) -> str:
  if program.startswith('-m '):
    parts = program[3:].split('.')
    path = os.path.join(REPO, *parts) + '.py'
    return path if os.path.exists(path) else os.path.join(REPO, *parts, '__main__.py')
  return os.path.join(REPO, program)


def _pages() -> list[str]:
  return [os.path.join(REPO, 'README.md')] + sorted(glob.glob(os.path.join(REPO, 'docs', '*.md')))


def test_the_pages_name_commands():
  found = [c for page in _pages() for c in _commands(open(page, encoding='utf-8').read())]
  assert len(found) >= 60 and {p for p, _ in found} >= {
      '-m transformer_jax.train', '-m transformer_jax.evaluate', '-m transformer_jax.sweep',
      'experiments/speed/torch_baseline.py'}


@pytest.mark.parametrize('page', [os.path.relpath(p, REPO) for p in _pages()])
def test_every_command_line_of_a_page_parses_against_its_programs_flags(page):
  """A moved script or a renamed flag in a page fails here: each command's program exists,
  each flag is one it defines (absl's own, `--noNAME` of a switch), each `--config.FIELD` a
  field of its config file and each `--override=FIELD=...` a field of configs/base.py."""
  base_fields = fields.flatten(loading.from_file(os.path.join(REPO, 'configs', 'base.py')))
  translator_flags, _, _ = _defined(os.path.join(REPO, 'transformer_jax', 'decoding',
                                                 'translator.py'))
  problems = []
  for program, flags_given in _commands(open(os.path.join(REPO, page), encoding='utf-8').read()):
    path = _module(program)
    if not os.path.exists(path):
      problems.append(f'{program}: no such program')
      continue
    real, _, translator = _defined(path)
    known = {**real, **(translator_flags if translator else {})}
    config = next((value for name, value in flags_given if name == 'config'), None)
    for name, value in flags_given:
      if name.startswith('config.'):
        if config and re.fullmatch(r'configs/\w+\.py', config) and not name[7:].isupper():
          config_fields = fields.flatten(loading.from_file(os.path.join(REPO, config)))
          if name[len('config.'):] not in config_fields:
            problems.append(f'{program} --{name}: no such field in {config}')
        continue
      if name == 'override' and '=' in value and value[0].isalpha():
        field = value.split('=')[0]
        if field not in base_fields:
          problems.append(f'{program} --override={value}: no field {field}')
      bare = name[2:] if name.startswith('no') and known.get(name[2:]) in ('bool', 'boolean') \
          else name
      if bare not in known and bare not in ABSL:
        problems.append(f'{program}: no flag --{name}')
  assert problems == [], f'{page}: {problems}'
