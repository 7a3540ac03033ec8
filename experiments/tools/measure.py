"""What the timing scripts share: variants measured in interleaved rounds, the training
loop's speed at a config's packed shape, and the result written as JSON stamped with its
provenance.

  measure = loading.import_sibling(__file__, '../tools/measure')
  rounds = measure.interleaved(['before', 'now'], 2, lambda variant: ...)
  measure.write({'rounds': rounds, 'median': measure.medians(rounds)}, path)
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Callable

from transformer_jax.config import loading
from transformer_jax.storage import provenance
from transformer_jax.training import metrics_log

checkout = loading.import_sibling(__file__, 'checkout')
multi30k_raw = loading.import_sibling(__file__, 'multi30k_raw')


def interleaved(variants: list[str], rounds: int, measure: Callable[[str], Any]) -> list[dict]:
  """{variant: measure(variant)} for each of `rounds` rounds, the variants in order in even
  rounds and reversed in odd ones (A B, B A: a drift of the machine's speed over the rounds
  falls on every variant alike). Each figure is printed as a JSON line as it is measured, so a
  run stopped early keeps what it has."""
  measured = []
  for r in range(rounds):
    measured.append({})
    for variant in variants if r % 2 == 0 else variants[::-1]:
      measured[-1][variant] = measure(variant)
      print(json.dumps({'round': r, variant: measured[-1][variant]}), flush=True)
  return measured


def medians(rounds: list[dict]) -> dict:
  """Each variant's median over `interleaved`'s rounds."""
  return {variant: statistics.median(r[variant] for r in rounds) for variant in rounds[0]}


def packed_shape(config_file: str) -> tuple[int, int]:
  """Rows and length of the config's training batches packed at `data.max_length` (one
  shape, so that every step compiles once)."""
  data = loading.from_file(os.path.join(checkout.ROOT, config_file)).data
  return data.tokens_per_batch // data.max_length, data.max_length


def packed_overrides(config_file: str, manual_dir: str | None, scratch: str) -> list[str]:
  """`--config.` flags of a run on Multi30k's raw files (`multi30k_raw`), its dataset prepared
  under `scratch`, its batches packed (`packed_shape`)."""
  return [f'--config.data.manual_dir={multi30k_raw.directory(manual_dir)}',
          f'--config.data.tfds_data_dir={os.path.join(scratch, "tfds")}',
          f'--config.data.pack_length={packed_shape(config_file)[1]}']


def loop_steps_per_second(code: str, config_file: str, flags: list[str], steps: int,
                          log_every: int, scratch: str) -> float:
  """Steps/s of the training command run in checkout `code` for `steps` steps with `flags`,
  logging every `log_every`: 1 / the mean `step_time` of its 'train' records after the first
  (which holds the warm-up). One dev batch at the end, no BLEU, one checkpoint."""
  with tempfile.TemporaryDirectory(dir=scratch) as workdir:
    subprocess.run(
        [sys.executable, '-m', 'transformer_jax.train', f'--config={config_file}',
         f'--workdir={workdir}', *flags, f'--config.train.num_train_steps={steps}',
         f'--config.train.log_every_steps={log_every}',
         f'--config.train.eval_every_steps={steps}',
         f'--config.train.checkpoint_every_steps={steps}',
         '--config.train.num_eval_steps=1', '--config.train.eval_bleu=false'],
        cwd=code, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [r for r in metrics_log.read(os.path.join(workdir, 'metrics.jsonl'))
               if r['split'] == 'train']
  assert [r['step'] for r in records] == list(range(log_every, steps + 1, log_every))
  return 1 / statistics.mean(r['step_time'] for r in records[1:])


def write(result: dict, path: str | None, device: str | None = None) -> None:
  """`result` after its provenance (`provenance.record(device)`: the commit, the package
  versions and the machine), printed and, given `path`, written there as indented JSON."""
  text = json.dumps({'provenance': provenance.record(device), **result}, indent=1)
  print(text, flush=True)
  if path:
    with open(path, 'w') as f:
      f.write(text + '\n')
