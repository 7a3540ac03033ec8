"""Config and sweep files, loaded from any directory.

Configs live in `configs/` (documented field by field in `configs/base.py`). A config file is a
Python file with `get_config()` (or `get_config(arg)`, loaded as `FILE.py:ARG`); it imports the
config files it builds on with `import_sibling`, by path, so that it works from any working
directory and from an installed package. A sweep file is a config file whose `get_config(row)`
gives each row's config (`transformer_jax.sweep`). Loading checks no value: a config is checked
where it enters a process (`checks`).
"""

import importlib.util
import os
import types

import ml_collections


def load_module(path: str) -> types.ModuleType:
  """The Python file at `path` as a new module object (nothing is added to sys.modules)."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path}: no such file')
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def import_sibling(file: str, name: str) -> types.ModuleType:
  """The Python file `name`.py beside `file` (a caller's `__file__`) as a module; `name` may be
  a path relative to that directory, e.g. '../configs/multi30k', and may end in '.py'."""
  name = name.removesuffix('.py')
  return load_module(os.path.join(os.path.dirname(os.path.abspath(file)), f'{name}.py'))


def load_sweep(path: str) -> types.ModuleType:
  """A sweep file (`ROWS` and `get_config(row)`; see `transformer_jax.sweep`) as a module."""
  module = load_module(path)
  for name in ('ROWS', 'get_config'):
    if not hasattr(module, name):
      raise ValueError(f'{path} defines no {name} (it is not a sweep file)')
  return module


def from_file(spec: str) -> ml_collections.ConfigDict:
  """The config of a config file, 'FILE.py' or 'FILE.py:ARG' (as `--config=` takes it)."""
  path, _, arg = spec.partition(':')
  module = load_module(path)
  return module.get_config(arg) if arg else module.get_config()
