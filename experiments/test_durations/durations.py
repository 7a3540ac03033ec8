"""The test suite's time per test and per file, from the output of `pytest --durations=0`.

  PYTEST_ADDOPTS=--durations=0 bash .ci/run > ci.log 2>&1
  python experiments/test_durations/durations.py --log=ci.log \
      --output=experiments/test_durations/after_two_workers_full.json

Each test's seconds are its setup, call and teardown together (a module's fixture counts
towards the first test that uses it). The JSON holds the tests, the per-file totals, the
summary line pytest printed (tests counted, wall time) and, with --wall_seconds, the whole
`.ci/run` time; the per-file table is printed as Markdown for
experiments/test_durations/README.md.
"""

import collections
import json
import re
import sys

from absl import app, flags

from transformer_jax import cli
from transformer_jax.storage import provenance

_LOG = flags.DEFINE_string('log', None, 'The output of a pytest run with --durations=0.',
                          required=True)
_OUTPUT = flags.DEFINE_string('output', None, 'Where to write the figures.')
cli.renamed('json', 'output', 'the file the figures are written to; --json is a switch')
_LABEL = flags.DEFINE_string('label', '', 'What was run, recorded in the JSON.')
_WALL_SECONDS = flags.DEFINE_float('wall_seconds', None, 'The whole command\'s time (bash '
                                   '.ci/run: the install included).')

_DURATION = re.compile(r'^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S.*?)\s*$')
_SUMMARY = re.compile(r'^=*\s*(\d+ passed.*? in [\d.]+s.*?)\s*=*$')


def parse(lines) -> tuple[dict[str, float], str | None]:
  """(test id -> seconds, pytest's summary line) of a `--durations=0` report."""
  tests, summary = collections.defaultdict(float), None
  for line in lines:
    if match := _DURATION.match(line):
      seconds, _, test = match.groups()
      tests[test] += float(seconds)
    elif match := _SUMMARY.match(line.strip()):
      summary = match.group(1)
  return dict(tests), summary


def per_file(tests: dict[str, float]) -> dict[str, float]:
  files = collections.defaultdict(float)
  for test, seconds in tests.items():
    files[test.split('::')[0]] += seconds
  return dict(sorted(files.items(), key=lambda item: -item[1]))


def main(argv) -> None:
  del argv
  with open(_LOG.value, encoding='utf-8', errors='replace') as f:
    tests, summary = parse(f)
  if not tests:
    sys.exit(f'{_LOG.value}: no --durations=0 lines found')
  files = per_file(tests)
  result = {'label': _LABEL.value, 'provenance': provenance.record(),
            'pytest_summary': summary, 'wall_seconds': _WALL_SECONDS.value,
            'tests_timed': len(tests), 'sum_of_test_seconds': round(sum(tests.values()), 2),
            'files': {name: round(seconds, 2) for name, seconds in files.items()},
            'tests': {name: round(seconds, 2)
                      for name, seconds in sorted(tests.items(), key=lambda item: -item[1])}}
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=1)
      f.write('\n')
  print(f'{summary}; {len(tests)} tests timed, {sum(tests.values()):.0f} s in all')
  print('| file | seconds |\n|---|---|')
  for name, seconds in files.items():
    print(f'| `{name}` | {seconds:.0f} |')


if __name__ == '__main__':
  app.run(main)
