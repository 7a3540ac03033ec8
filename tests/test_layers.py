"""The package's layers: every import points down (the table below), docs/modules.md's module
map is the modules' own docstrings, and no function is longer than a reader holds at once.

  python tests/test_layers.py --write    # rewrites docs/modules.md's map from the docstrings
"""

import ast
import os
import sys

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       'transformer_jax')
MODULES_PAGE = os.path.join(os.path.dirname(PACKAGE), 'docs', 'modules.md')

# Which layers each layer may import, besides its own modules. A layer is a folder of the package;
# at its top sit the commands (train, translate, evaluate, sweep, export, ..., and
# `data/__main__.py`), each importing libraries, never another command, and `cli`, the
# command line that every command shares.
LIBRARIES = ('config', 'storage', 'data', 'model', 'training', 'decoding', 'loop', 'sweep')
MAY_IMPORT = {
    'config': set(),
    'storage': set(),
    'data': {'config', 'storage'},
    'model': {'config', 'data'},
    'training': {'config', 'storage', 'data', 'model'},
    'decoding': {'config', 'storage', 'data', 'model', 'training'},
    'loop': {'config', 'storage', 'data', 'model', 'training', 'decoding'},
    'sweep': {'config', 'storage', 'data', 'model', 'training', 'decoding', 'loop'},
    'cli': {'config', 'storage'},
    'commands': {*LIBRARIES, 'cli'},
}
# The map's order: the top layer first, as a reader meets the package.
ORDER = ('commands', 'cli', 'sweep', 'loop', 'decoding', 'training', 'model', 'data', 'storage', 'config')
MAP_START = ('<!-- module map: the first paragraph of each docstring; '
             'python tests/test_layers.py --write -->')
MAP_END = '<!-- end of the module map -->'
# A docstring's first paragraph, the map's cell, is at most this long.
SUMMARY_CHARS = 200
# No function of the package (docstring included) is longer than this many lines.
FUNCTION_LINES = 80


def _modules() -> dict[str, str]:
  """Dotted module name -> file, for every module of the package."""
  modules = {}
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        parts = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].split(os.sep)
        if parts[-1] == '__init__':
          parts = parts[:-1]
        modules['.'.join(parts)] = path
  return modules


def _layer(module: str) -> str:
  parts = module.split('.')
  if len(parts) == 2 and parts[1] in (*LIBRARIES, 'cli'):  # cli, or a layer's own __init__
    return parts[1]
  if len(parts) < 3 or parts[-1] == '__main__':
    return 'commands'
  return parts[1]


def _imports(path: str, modules: dict[str, str]) -> set[str]:
  """The package's modules that the file at `path` imports, anywhere in it."""
  found = set()
  for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      for alias in node.names:
        child = f'{node.module}.{alias.name}'
        found.add(child if child in modules else node.module)
  return {name for name in found if name in modules}


def _upward(module: str, path: str, modules: dict[str, str]) -> list[str]:
  """The imports of `module` (its file at `path`) that the table does not allow."""
  layer = _layer(module)
  allowed = MAY_IMPORT[layer] | ({layer} if layer != 'commands' else set())
  return [f'{module} ({layer}) imports {imported} ({_layer(imported)})'
          for imported in sorted(_imports(path, modules))
          if imported != module and _layer(imported) not in allowed]


def test_every_import_points_down():
  modules = _modules()
  assert {_layer(module) for module in modules} == set(ORDER)
  wrong = [line for module, path in sorted(modules.items())
           for line in _upward(module, path, modules)]
  assert not wrong, '\n'.join(wrong)


@pytest.mark.parametrize('module, source, named', [
    # A module placed in training/ that imports a command (in a function, as the package's lazy
    # imports are), a decoding module and one of its own layer.
    ('transformer_jax.training.module',
     'from transformer_jax.training import together\n'
     'import transformer_jax.decoding.bleu\n'
     'def f():\n  from transformer_jax import train\n',
     ['transformer_jax.decoding.bleu (decoding)', 'transformer_jax.train (commands)']),
    # A module at the package's top is a command: it may import any library and cli, but no
    # other command.
    ('transformer_jax.command',
     'from transformer_jax import cli, evaluate\n'
     'from transformer_jax.loop import train_loop\n'
     'from transformer_jax.config import fields\n',
     ['transformer_jax.evaluate (commands)']),
])
def test_an_import_pointing_up_is_named(tmp_path, module, source, named):
  # The check itself.
  path = tmp_path / 'module.py'
  path.write_text(source)
  layer = _layer(module)
  assert _upward(module, str(path), _modules()) == [
      f'{module} ({layer}) imports {imported}' for imported in named]


def _summary(path: str) -> str:
  """The first paragraph of the module's docstring, on one line."""
  docstring = ast.get_docstring(ast.parse(open(path, encoding='utf-8').read())) or ''
  return ' '.join(docstring.split('\n\n')[0].split())


def module_map() -> str:
  """docs/modules.md's module map: a row for each module, layer by layer, its docstring's first
  paragraph beside it."""
  modules = _modules()
  rows = ['| module | what it owns |', '|---|---|']
  for layer in ORDER:
    for module in sorted(modules, key=lambda m: (m.count('.') > 1 or layer == 'commands', m)):
      if _layer(module) == layer:
        path = os.path.relpath(modules[module], os.path.dirname(PACKAGE))
        if path.endswith('__init__.py'):
          path = os.path.dirname(path) + '/'
        rows.append(f'| `{path}` | {_summary(modules[module])} |')
  return '\n'.join(rows)


def _page_map() -> str:
  text = open(MODULES_PAGE, encoding='utf-8').read()
  return text.split(MAP_START + '\n')[1].split('\n' + MAP_END)[0]


def test_the_module_map_is_the_docstrings():
  assert _page_map() == module_map(), (
      "docs/modules.md's module map differs from the docstrings: "
      'python tests/test_layers.py --write')


def test_every_module_says_what_it_owns_in_a_short_first_paragraph():
  long_or_missing = [f'{path}: {len(_summary(path))} characters'
                     for path in _modules().values()
                     if not 0 < len(_summary(path)) <= SUMMARY_CHARS]
  assert not long_or_missing, '\n'.join(long_or_missing)


def long_functions(source: str) -> list[tuple[str, int]]:
  """(name, lines) of each function in `source` longer than FUNCTION_LINES."""
  return [(node.name, node.end_lineno - node.lineno + 1)
          for node in ast.walk(ast.parse(source))
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
          and node.end_lineno - node.lineno + 1 > FUNCTION_LINES]


def test_no_function_of_the_package_is_over_80_lines():
  assert long_functions('def f():\n' + '  x = 1\n' * FUNCTION_LINES) == [('f', 81)]
  assert long_functions('def f():\n' + '  x = 1\n' * (FUNCTION_LINES - 1)) == []
  long = [f'{os.path.relpath(path, PACKAGE)}: {name}, {lines} lines'
          for path in _modules().values()
          for name, lines in long_functions(open(path, encoding='utf-8').read())]
  assert not long, '\n'.join(long)


if __name__ == '__main__':
  if sys.argv[1:] != ['--write']:
    sys.exit(__doc__)
  text = open(MODULES_PAGE, encoding='utf-8').read()
  before, rest = text.split(MAP_START + '\n')
  after = rest.split('\n' + MAP_END)[1]
  with open(MODULES_PAGE, 'w', encoding='utf-8') as f:
    f.write(before + MAP_START + '\n' + module_map() + '\n' + MAP_END + after)
