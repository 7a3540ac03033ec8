"""The package as a user gets it: the wheel holds every module, and installed into a fresh
virtual environment its commands run from an unrelated directory, with config files (which
import their sibling config files) given by absolute or relative path."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import CORPUS

REPO = pathlib.Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(command: list, cwd: pathlib.Path, env: dict) -> subprocess.CompletedProcess:
  result = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  return result


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
  """(python of a fresh virtual environment with the wheel installed, the wheel's path)."""
  root = tmp_path_factory.mktemp('packaging')
  env = {key: value for key, value in os.environ.items() if key != 'PYTHONPATH'}
  # Built from a copy of what the wheel is made of, so the build leaves nothing in the clone.
  source = root / 'source'
  shutil.copytree(REPO / 'transformer_jax', source / 'transformer_jax',
                  ignore=shutil.ignore_patterns('__pycache__'))
  for name in ('pyproject.toml', 'README.md'):
    shutil.copy(REPO / name, source / name)
  _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--quiet', '--wheel-dir',
        root / 'wheels', source], root, env)
  [wheel] = (root / 'wheels').glob('transformer_jax-*.whl')
  _run([sys.executable, '-m', 'venv', root / 'venv'], root, env)
  python = root / 'venv' / 'bin' / 'python'
  # The dependencies come from this environment (itself a virtual environment in CI), added
  # after the new one's own site-packages; the package itself only from the wheel.
  purelib = _run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                 root, env).stdout.strip()
  parent = [path for path in sys.path
            if path.endswith(('site-packages', 'dist-packages')) and os.path.isdir(path)]
  pathlib.Path(purelib, 'parent_environment.pth').write_text(
      ''.join(f'import site; site.addsitedir({path!r})\n' for path in parent))
  # --ignore-installed: in CI the parent environment holds an installed copy of the package,
  # which pip would otherwise count as already there.
  _run([python, '-m', 'pip', 'install', '--no-deps', '--no-index', '--ignore-installed', '--quiet',
        wheel], root, env)
  return python, wheel


def test_the_wheel_holds_every_module_of_the_package(installed):
  _, wheel = installed
  modules = {path.relative_to(REPO).as_posix()
             for path in (REPO / 'transformer_jax').rglob('*.py')}
  with zipfile.ZipFile(wheel) as archive:
    packaged = {name for name in archive.namelist() if name.endswith('.py')}
  assert modules == packaged


def test_installed_commands_run_from_any_directory(installed, tmp_path):
  python, _ = installed
  env = {key: value for key, value in os.environ.items()
         if key not in ('PYTHONPATH', 'XLA_FLAGS')}
  where = _run([python, '-c', 'import transformer_jax.train, transformer_jax.data.pipeline; '
                'print(transformer_jax.train.__file__)'], tmp_path, env).stdout
  assert where.startswith(str(python.parent.parent)), where  # the venv's copy, not the repo's

  # A config file that imports its siblings (table3 -> base, big), by absolute path with a row.
  summary = _run([python, '-m', 'transformer_jax.summary',
                  f'--config={REPO / "configs" / "table3.py"}:C2', '--json'], tmp_path, env)
  c2 = json.loads(summary.stdout)
  base = json.loads(_run([python, '-m', 'transformer_jax.summary',
                          f'--config={REPO / "configs" / "base.py"}', '--json'],
                         tmp_path, env).stdout)
  assert 0 < c2['params_non_embedding'] < base['params_non_embedding']  # C2: N = 4, not 6

  # A few training steps, the config given by a path relative to the working directory, on
  # the session's corpus (conftest.py).
  tiny = os.path.relpath(REPO / 'configs' / 'tiny.py', tmp_path)
  _run([python, '-m', 'transformer_jax.train', f'--config={tiny}', '--workdir=run',
        *(f'--config.{name}={value}' for name, value in CORPUS.items()),
        '--config.data.vocab_size=200',
        '--config.model.num_layers=1', '--config.model.d_model=32', '--config.model.d_ff=64',
        '--config.model.d_k=8', '--config.model.d_v=8', '--config.train.num_train_steps=3',
        '--config.train.eval_every_steps=3', '--config.train.num_eval_steps=1',
        '--config.train.eval_bleu=false', '--config.train.log_every_steps=1',
        '--config.train.checkpoint_every_steps=3'], tmp_path, env)
  records = [json.loads(line) for line in (tmp_path / 'run' / 'metrics.jsonl').open()]
  assert [r['step'] for r in records if r['split'] == 'train'] == [1, 2, 3]
  assert (tmp_path / 'run' / 'checkpoints' / '3').is_dir()
