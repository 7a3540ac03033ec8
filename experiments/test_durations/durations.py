"""The test suite's time per test and per file, from the output of `pytest --durations=0`.

  PYTEST_ADDOPTS=--durations=0 bash .ci/run > ci.log 2>&1
  python experiments/test_durations/durations.py ci.log --json=experiments/test_durations/after.json

Each test's seconds are its setup, call and teardown together (a module's fixture counts
towards the first test that uses it). The JSON holds the tests, the per-file totals, the
summary line pytest printed (tests counted, wall time) and, with --install_seconds, the whole
`.ci/run` time; the per-file table is printed as Markdown for tests/README.md.
"""

import argparse
import collections
import json
import re
import sys

from transformer_jax.storage import provenance

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


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('log', help='the output of a pytest run with --durations=0')
  parser.add_argument('--json', help='where to write the figures')
  parser.add_argument('--label', default='', help='what was run, recorded in the JSON')
  parser.add_argument('--wall_seconds', type=float,
                      help='the whole command\'s time (bash .ci/run: the install included)')
  args = parser.parse_args(argv)
  with open(args.log, encoding='utf-8', errors='replace') as f:
    tests, summary = parse(f)
  if not tests:
    sys.exit(f'{args.log}: no --durations=0 lines found')
  files = per_file(tests)
  result = {'label': args.label, 'provenance': provenance.record(),
            'pytest_summary': summary, 'wall_seconds': args.wall_seconds,
            'tests_timed': len(tests), 'sum_of_test_seconds': round(sum(tests.values()), 2),
            'files': {name: round(seconds, 2) for name, seconds in files.items()},
            'tests': {name: round(seconds, 2)
                      for name, seconds in sorted(tests.items(), key=lambda item: -item[1])}}
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump(result, f, indent=1)
      f.write('\n')
  print(f'{summary}; {len(tests)} tests timed, {sum(tests.values()):.0f} s in all')
  print('| file | seconds |\n|---|---|')
  for name, seconds in files.items():
    print(f'| `{name}` | {seconds:.0f} |')


if __name__ == '__main__':
  main()
