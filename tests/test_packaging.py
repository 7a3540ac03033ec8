"""The package as a user gets it: the wheel holds every module, and installed into a fresh
virtual environment its commands run from an unrelated directory, with config files (which
import their sibling config files) given by absolute or relative path; README.md's quick start,
as it is written there, trains and evaluates with the installed package."""

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from conftest import TEST_XLA_FLAGS

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
  # Without a pip of its own (ensurepip is most of a venv's creation time): this environment's
  # pip installs into it (`--python`).
  _run([sys.executable, '-m', 'venv', '--without-pip', root / 'venv'], root, env)
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
  _run([sys.executable, '-m', 'pip', '--python', python, 'install', '--no-deps', '--no-index',
        '--ignore-installed', '--quiet', wheel], root, env)
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


QUICK_START_STEPS = 20


def quick_start_commands() -> list[str]:
  """The `python -m transformer_jax.<command>` parts of README.md's quick start (the first
  code block of its Quickstart section) that train, evaluate and export, in order."""
  readme = (REPO / 'README.md').read_text(encoding='utf-8')
  block = re.search(r'## Quickstart\n.*?```bash\n(.*?)```', readme, re.S).group(1)
  commands = [part.strip() for line in block.splitlines() for part in line.split('&&')]
  return [c for c in commands if c.startswith(('python -m transformer_jax.train ',
                                               'python -m transformer_jax.evaluate ',
                                               'python -m transformer_jax.export '))]


def test_the_readme_quick_start_trains_evaluates_and_exports_with_the_installed_package(
    installed, tmp_path):
  """README.md's train, evaluate and export lines in order, as written there
  (`configs/tiny.py`, its built-in corpus and fine buckets), run by the installed package from
  a directory holding only the clone's configs/, shortened in steps alone (training steps, and
  one dev batch): the loss falls, checkpoints, metrics and the evaluation's files are written,
  `evaluate` reads the run's checkpoints, and the exported model's card shows its test BLEU."""
  python, _ = installed
  train_line, evaluate_line, export_line = quick_start_commands()
  shutil.copytree(REPO / 'configs', tmp_path / 'configs')
  workdir = re.search(r'--workdir=(\S+)', train_line).group(1)
  assert f'--workdir={workdir}' in evaluate_line
  run = tmp_path / 'tiny'

  def command(line: str) -> list[str]:
    words = shlex.split(line.replace(f'--workdir={workdir}', f'--workdir={run}'))
    assert words[0] == 'python'
    return [python, *words[1:]]

  # The suite's LLVM level (conftest.py), which compiles faster and computes the same.
  env = {**{key: value for key, value in os.environ.items() if key != 'PYTHONPATH'},
         'XLA_FLAGS': TEST_XLA_FLAGS}
  steps = QUICK_START_STEPS
  _run(command(train_line) + [f'--config.train.num_train_steps={steps}',
                              f'--config.train.eval_every_steps={steps}',
                              '--config.train.num_eval_steps=1',
                              f'--config.train.checkpoint_every_steps={steps // 2}',
                              '--config.train.log_every_steps=1'], tmp_path, env)
  records = [json.loads(line) for line in (run / 'metrics.jsonl').open()]
  losses = [r['loss'] for r in records if r['split'] == 'train']
  assert [r['step'] for r in records if r['split'] == 'train'] == list(range(1, steps + 1))
  assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.3, losses
  [dev] = [r for r in records if r['split'] == 'validation']
  assert dev['step'] == steps and 0 <= dev['bleu'] <= 100
  assert sorted(os.listdir(run / 'checkpoints'), key=int) == [str(steps // 2), str(steps)]
  saved = json.loads((run / 'config.json').read_text())
  assert saved['data']['dataset'] == 'builtin' and saved['data']['buckets'] == 'auto'
  # Fine buckets on a CPU (multiples of 8); coarse ones would be max_length 64's 16, 32 and 64.
  lengths = {int(m.group(1)) for r in records if r['split'] == 'compile'
             for m in [re.fullmatch(r'train step, batches of \d+ x (\d+)', r['what'])] if m}
  assert lengths and all(n % 8 == 0 for n in lengths) and lengths - {16, 32, 64}, lengths
  assert saved['model']['d_model'] == 128  # configs/tiny.py's own model

  report = _run(command(evaluate_line), tmp_path, env).stdout
  saved = [steps // 2, steps]
  assert f'test: 1000 sentences, checkpoints {saved} averaged' in report, report
  [figures] = (run / 'eval').glob(f'test-step{steps}-avg2-*.json')
  result = json.loads(figures.read_text())
  assert result['checkpoint_steps'] == saved and result['sentences'] == 1000
  assert len(pathlib.Path(result['hypotheses']).read_text().splitlines()) == 1000

  output = re.search(r'--output=(\S+)', export_line).group(1)
  exported = tmp_path / 'tiny-hf'
  _run(command(export_line.replace(f'--output={output}', f'--output={exported}')), tmp_path, env)
  card = (exported / 'README.md').read_text()
  assert (f'| test (`evaluate`, checkpoints {saved}, beam {result["beam_size"]}, '
          f'α {result["alpha"]}) | {result["bleu_detokenized"]:.2f} (') in card, card
