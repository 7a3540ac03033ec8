"""The package's layers: every import points down (the table below), and README.md's module map
is the modules' own docstrings.

  python tests/test_layers.py --write    # rewrites README.md's module map from the docstrings
"""

import ast
import os
import sys

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       'transformer_jax')
README = os.path.join(os.path.dirname(PACKAGE), 'README.md')

# Which layers each layer may import, besides its own modules. 'commands' are the modules at the
# package's top (train, translate, evaluate, sweep, export, ...) and `data/__main__.py`: they
# may import anything.
MAY_IMPORT = {
    'storage': set(),
    'data': {'storage'},
    'model': {'data'},
    'training': {'storage', 'data', 'model'},
    'decoding': {'storage', 'data', 'model', 'training'},
}
# The map's order: the top layer first, as a reader meets the package.
ORDER = ('commands', 'decoding', 'training', 'model', 'data', 'storage')
MAP_START = ('<!-- module map: the first paragraph of each docstring; '
             'python tests/test_layers.py --write -->')
MAP_END = '<!-- end of the module map -->'
# A docstring's first paragraph, the map's cell, is at most this long.
SUMMARY_CHARS = 200


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
  if len(parts) == 2 and parts[1] in MAY_IMPORT:  # a layer's own __init__
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
  if layer == 'commands':
    return []
  return [f'{module} ({layer}) imports {imported} ({_layer(imported)})'
          for imported in sorted(_imports(path, modules))
          if _layer(imported) not in {layer, *MAY_IMPORT[layer]}]


def test_every_import_points_down():
  modules = _modules()
  assert {_layer(module) for module in modules} == set(ORDER)
  wrong = [line for module, path in sorted(modules.items())
           for line in _upward(module, path, modules)]
  assert not wrong, '\n'.join(wrong)


def test_an_import_pointing_up_is_named(tmp_path):
  # The check itself, on a module placed in training/ that imports a command (in a function,
  # as the package's lazy imports are), a decoding module and one of its own layer.
  path = tmp_path / 'module.py'
  path.write_text('from transformer_jax.training import rows\n'
                  'import transformer_jax.decoding.bleu\n'
                  'def f():\n  from transformer_jax import train\n')
  assert _upward('transformer_jax.training.module', str(path), _modules()) == [
      'transformer_jax.training.module (training) imports transformer_jax.decoding.bleu '
      '(decoding)',
      'transformer_jax.training.module (training) imports transformer_jax.train (commands)']


def _summary(path: str) -> str:
  """The first paragraph of the module's docstring, on one line."""
  docstring = ast.get_docstring(ast.parse(open(path, encoding='utf-8').read())) or ''
  return ' '.join(docstring.split('\n\n')[0].split())


def module_map() -> str:
  """README.md's module map: a row for each module, layer by layer, its docstring's first
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


def _readme_map() -> str:
  text = open(README, encoding='utf-8').read()
  return text.split(MAP_START + '\n')[1].split('\n' + MAP_END)[0]


def test_the_readme_module_map_is_the_docstrings():
  assert _readme_map() == module_map(), (
      "README.md's module map differs from the docstrings: python tests/test_layers.py --write")


def test_every_module_says_what_it_owns_in_a_short_first_paragraph():
  long_or_missing = [f'{path}: {len(_summary(path))} characters'
                     for path in _modules().values()
                     if not 0 < len(_summary(path)) <= SUMMARY_CHARS]
  assert not long_or_missing, '\n'.join(long_or_missing)


if __name__ == '__main__':
  if sys.argv[1:] != ['--write']:
    sys.exit(__doc__)
  text = open(README, encoding='utf-8').read()
  before, rest = text.split(MAP_START + '\n')
  after = rest.split('\n' + MAP_END)[1]
  with open(README, 'w', encoding='utf-8') as f:
    f.write(before + MAP_START + '\n' + module_map() + '\n' + MAP_END + after)
