r"""Table 3 in miniature: configs/table3.py's rows (the paper's 20) scaled around a small base that
trains on Multi30k EN->DE on a 2-core CPU.

  python -m transformer_jax.sweep --sweep=experiments/table3_multi30k/sweep.py \
      --workdir=/tmp/table3_multi30k --results=experiments/table3_multi30k/rows
  python -m transformer_jax.train --config=experiments/table3_multi30k/sweep.py:C2 --workdir=DIR

Every file under --results is one finished row; the runner skips those, so the sweep resumes
on any machine from the committed rows (a new --results directory trains every row afresh).
`--together=2` trains a row and its seed as one program.

Scaling. Every row of configs/table3.py (a row added there too), by one rule (`miniature`):
the miniature is the paper's base divided by WIDTH = 4 in width (d_model 128, d_ff 512,
d_k = d_v = 16; h stays 8) and by DEPTH = 2 in depth (N = 3), and each row changes what the
paper's row changes, by the same factors: d_model, d_ff, d_k, d_v divided by 4, N by 2, steps
by the paper's 100K over STEPS (big's 300K becomes 3 STEPS); every other field (h, P_drop,
ε_ls, positions) as the paper's row sets it. So A1-A4 have h = 1, 4, 16, 32 with
d_k = d_v = 128 / h; B1, B2 d_k 4 and 8; C1-C3 N = 1, 2, 4; C4, C5 d_model 64 and 256; C6, C7
d_ff 256 and 1024; big d_model 256, d_ff 1024, h = 16, P_drop 0.3. The one exception: the big
model's checkpoint interval and averaging (§6.1's recipe, which Table 3's evaluation does not
use) are the sweep's own (`SWEEPS_OWN`).
Not in the paper: every row again with seed 1, and base with seed 2 too (41 rows for 20): a
single run per row cannot tell a trend from seed noise. experiments/table3_multi30k/trends.py reads the
finished rows and decides each of the paper's trends beyond the seeds' spread.
Every row trains STEPS steps on the same data except big, which trains 3 * STEPS as Table 3's
"train steps" column has it (100K for every row, 300K for big; an earlier version of this file
trained big for STEPS, and it was still learning: dev perplexity 6.63, 6.46, 6.25 at steps 3000,
3500, 4000, experiments/table3_multi30k/README.md), batches of 4096 source + 4096
target tokens, warmup 400 steps (the paper's 4000 is 4% of 100K; 400 keeps the peak learning
rate of eq. 3 reachable early), Q/K/V initialised as tensor2tensor v1's fused projections (the
default; experiments/postnorm/README.md), and is evaluated on the dev split (Multi30k val,
1014 sentences) as Table 3 was: beam 4, α 0.6, no checkpoint averaging, per-token perplexity;
dev perplexity is also logged every 500 steps.

Step budget, from a measured curve: base (seed 0), trained as a probe, had dev perplexity
16.95, 8.23, 6.82, 6.30, 6.00, 5.85, 5.85 and 5.81 at steps 500, 1000, ..., 4000: flat over the
last 20% of 4000 steps (-0.7% from step 3500). The probe's checkpoint at step 4000 is the base
row's (eq. 3 does not depend on the run's length, so it is the same run). The probe's median
step took 0.68 s over steps 2001-4000 on a 2-core Intel Xeon; the 41 rows
cost about 59.6 base rows of 4000 steps (forward FLOPs per token relative to base, at length
16: C1 0.57, C2 0.78, C3 1.22, C4 0.43, C5 2.54, C6 0.82, C7 1.36, B1 0.89, B2 0.93, big 3.26,
times 3 for its steps), about 45 hours if time follows FLOPs: the sweep resumes from the
committed rows, so it can run in parts, on any machine.

An earlier version of this file (commit 03ccae1: 700 steps, separate Q/K/V initialisation, one
seed) produced experiments/table3_multi30k/700steps/table3.md.
"""

import os

import ml_collections

from transformer_jax.config import loading

multi30k = loading.import_sibling(__file__, '../../configs/multi30k')
table3 = loading.import_sibling(__file__, '../../configs/table3')

# Multi30k's raw files from a folder shared/data/multi30k beside the repository when there is
# one (train, val, test_2016_flickr x en, de, gzipped); else TFDS downloads the corpus.
MULTI30K = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                         '..', 'shared', 'data', 'multi30k'))

STEPS = 4000
# The scaling rule (module docstring): the paper's widths over WIDTH, its depth over DEPTH.
WIDTH, DEPTH = 4, 2
D_MODEL = 512 // WIDTH

# Every field the sweep depends on is pinned here, so configs/multi30k.py (the best-effort
# Multi30k model) can change without changing the sweep.
BASE = {
    'data.manual_dir': MULTI30K if os.path.isdir(MULTI30K) else None,
    'data.preprocessing': 'none',  # raw, cased text: Table 3's BLEU is cased
    # The batches every committed row was trained on (a CPU's default), on any platform.
    'data.buckets': 'fine',
    'data.pack_length': 0,
    'data.vocab_size': 6000,
    'data.tokens_per_batch': 4096,
    'model.num_layers': 6 // DEPTH,
    'model.d_model': D_MODEL,
    'model.d_ff': 4 * D_MODEL,
    'model.num_heads': 8,
    'model.d_k': D_MODEL // 8,
    'model.d_v': D_MODEL // 8,
    'model.dropout_rate': 0.1,
    # The start vector the committed rows were trained with (the default became tensor2tensor's
    # zero vector after 29 of the 41 row-runs had finished); kept so every row is comparable.
    'model.decoder_start': 'learned',
    'train.label_smoothing': 0.1,
    'train.loss_chunk': 0,  # the whole logits, as every committed row was trained
    'train.num_train_steps': STEPS,
    'train.warmup_steps': 400,
    'train.log_every_steps': 100,
    'train.eval_every_steps': 500,  # dev perplexity only: the curve that shows convergence
    'train.eval_bleu': False,  # the sweep evaluates BLEU with beam search at the end
    'train.checkpoint_every_steps': 500,
    'train.keep_checkpoints': 1,
    'decode.average_last': 1,
    'decode.beam_size': 4,  # as the sweep evaluates (Table 3: beam 4, no averaging)
}


# The factor by which the rule multiplies each field's value in a paper row.
SCALED = {'model.d_model': 1 / WIDTH, 'model.d_ff': 1 / WIDTH, 'model.d_k': 1 / WIDTH,
          'model.d_v': 1 / WIDTH, 'model.num_layers': 1 / DEPTH}
# Fields of a paper row that are not Table 3's variation (big's §6.1 recipe): BASE's values.
SWEEPS_OWN = ('train.checkpoint_every_steps', 'decode.average_last')


def miniature(row: str, steps: int = STEPS) -> dict:
  """configs/table3.py's `row` by the scaling rule, around a base of `steps` steps: its
  changes to the paper's base, each field scaled (`SCALED`; steps by `steps` over the paper's
  base's), kept, or left to the sweep (`SWEEPS_OWN`)."""
  paper_steps = table3.get_config('base').train.num_train_steps
  factors = {**SCALED, 'train.num_train_steps': steps / paper_steps}
  changes = {}
  for field, value in table3.ROWS[row].delta.items():
    if field in SWEEPS_OWN:
      continue
    if field in factors:
      scaled = value * factors[field]
      if scaled != int(scaled) or scaled < 1:
        raise ValueError(f'configs/table3.py row {row}: {field}={value} times {factors[field]:g} '
                         'is not a whole number: give the row a value the miniature can scale')
      value = int(scaled)
    changes[field] = value
  return changes


TABLE3_ROWS = {row: miniature(row) for row in table3.ROWS}


# Not in the paper: every row again with seed 1, and base with seed 2 too (initialisation,
# dropout and batch order change). A trend counts only beyond the spread of the seeds.
# Seed 0 of every row comes first, so a partly finished sweep is a whole table.
def with_seeds(rows: dict) -> dict:
  """`rows`, then each again with seed 1 and base with seed 2 too."""
  return {**rows, 'base_seed1': {'seed': 1}, 'base_seed2': {'seed': 2},
          **{f'{row}_seed1': {**changes, 'seed': 1}
             for row, changes in rows.items() if row != 'base'}}


ROWS = with_seeds(TABLE3_ROWS)

PAPER = table3.PAPER


def get_config(row: str = 'base') -> ml_collections.ConfigDict:
  if row not in ROWS:
    raise ValueError(f'unknown row {row!r}; the rows are: {", ".join(ROWS)}')
  config = multi30k.get_config()
  config.update_from_flattened_dict({**BASE, **ROWS[row]})
  return config
