r"""Table 3 in miniature, regularised for Multi30k: experiments/table3_multi30k/sweep.py's rows around
a base with P_drop 0.3, trained on an accelerator as groups of rows in one program.

  python -m transformer_jax.sweep --sweep=experiments/table3_regularised/sweep.py \
      --workdir=DIR --results=experiments/table3_regularised/rows \
      --together=4
  python -m transformer_jax.train --config=experiments/table3_regularised/sweep.py:D2 \
      --workdir=DIR

Why. At the paper's P_drop 0.1 the miniature base overfits Multi30k's 29k training pairs
(145M tokens of WMT14 EN-DE against about 0.8M here), so the rows that regularise won
(D2, P_drop 0.2, had dev perplexity 5.64 against base's 5.90) and the rows that only add
capacity lost (big, C5): 3 of Table 3's 8 trends held
(experiments/table3_multi30k/trends.md). Here the base is regularised as the published
Multi30k Transformer baseline is (P_drop 0.3, configs/multi30k.py), and every row changes what
the paper's row changes, around that base:
  A, B, C, E  as in experiments/table3_multi30k/sweep.py (heads, d_k, N, d_model, d_ff, learned positions), each
       at P_drop 0.3;
  D1, D2  P_drop 0.0 and 0.4: the paper's 0.0 and 0.2 around its 0.1, D2 as the paper's
       increase (+0.1), as big below. The ratio (2, so 0.6) was the first choice; at 0.6 both
       seeds underfit (dev perplexity 18.5 and 19.5 at step 10000, base's 4.8 to 5.0) and still
       fell 3 to 5% over the last 20% of the steps: no step budget would settle it
       (experiments/table3_regularised/budget.md);
  D3, D4  ε_ls 0.0 and 0.2: the base keeps the paper's 0.1 (so does the published Multi30k
       baseline), so these are the paper's values;
  big  d_model, d_ff doubled, h = 16 (as experiments/table3_multi30k/sweep.py) and P_drop 0.5: the paper's big
       adds 0.2 to base's P_drop (0.1 -> 0.3); its ratio, 3, would give 0.9.
Every row again with seed 1, base with seeds 1 and 2 too (41 rows in all, as
experiments/table3_multi30k/sweep.py); experiments/table3_multi30k/trends.py counts a trend only beyond the seeds' spread.

Training on one accelerator. Every training batch is packed at data.max_length (128 tokens a
row, 32 rows: one shape, compiled once) and `train.steps_per_call` steps run as one compiled
call, so that the host, which spends longer launching a step of this small model than the
device spends running it, dispatches once per 50 steps. `--together=4` trains base, its seeds
and the D rows (which differ only in the seed, P_drop and ε_ls: `together.VARYING`) four at a time
as one program, and each other row with its seed. A group must finish within one window (its
workdir goes with the machine); base's group of 11 at 10000 steps did not, in the 2026-11-28d
window (experiments/gpu/h200/window_2026-11-28d.jsonl). Rows trained together see the
same batches, in the order of the group's first row's seed: within a group the seeds vary the
initialisation and dropout, not the data order (the results page says so). Packing puts more
real tokens in each batch of 4096 token positions than experiments/table3_multi30k/sweep.py's
length buckets did, so a step here is not one of its steps.

Step budget. STEPS = 30000 steps a row (big: 3 STEPS, as Table 3's train steps column has it),
dev perplexity every 500 steps. The criterion: every row's dev perplexity flat (within 1%) over
its last 20% of steps. The probe was a first pass at 10000 steps on an H200 (base's group of
11, A1 to A4 and B1, two or three seeds each): only A4 met it there (each row's seed that
moved most: -0.8% for A4, -1.8% to -3.1% for the others that still fell). `experiments/table3_regularised/step_budget.py` fits a + b (step / 1000)^-k to each curve from 20% of
its steps on; at 30000 steps every fitted curve moves less than 0.9% over the last 20%, at
20000 up to 1.2% (experiments/table3_regularised/budget.md). The rows that
overfit (D1 at P_drop 0, D3 at ε_ls 0) rise instead and are left out: past their best, no
budget flattens them. The 10000-step rows are kept in
experiments/table3_regularised/probe_10000steps/. Warmup stays 400 steps, as
experiments/table3_multi30k/sweep.py's (the paper's 4000 is 4% of its 100k steps): the fitted curves were measured
with it. A checkpoint every 5000 steps: a row's workdir lives only as long as the accelerator
window, so it is for resuming within one, and it keeps the device's time for the steps.

Evaluation as experiments/table3_multi30k/sweep.py: the dev split (Multi30k val, 1014 sentences), beam 4, α 0.6,
no checkpoint averaging, per-token perplexity; cased text (Table 3's BLEU is cased).
"""

import ml_collections

from transformer_jax.config import loading

mini = loading.import_sibling(__file__, '../table3_multi30k/sweep')

STEPS = 30000
P_DROP = 0.3

BASE = {
    **mini.BASE,
    'model.dropout_rate': P_DROP,
    'model.decoder_start': 'zero',  # tensor2tensor's (the default), no older rows to match
    'data.buckets': 'coarse',  # evaluation's batches: three shapes on any platform
    'data.pack_length': 128,  # = data.max_length: every training batch one shape
    'train.steps_per_call': 50,  # divides log_every_steps, eval_every_steps and STEPS
    'train.num_train_steps': STEPS,
    'train.warmup_steps': 400,
    'train.checkpoint_every_steps': 5000,
}

def regularised(changes: dict) -> dict:
  """A miniature row's `changes` around a base at P_DROP: a P_drop moved by the paper's row's
  change over its base's 0.1 (D2: 0.2 -> P_DROP + 0.1, big: 0.3 -> P_DROP + 0.2), except no
  dropout, which stays 0 (D1)."""
  rate = changes.get('model.dropout_rate')
  if not rate:
    return changes
  paper_base = mini.table3.get_config('base').model.dropout_rate
  return {**changes, 'model.dropout_rate': round(P_DROP + rate - paper_base, 6)}


# Rows: configs/table3.py's, by experiments/table3_multi30k/sweep.py's rule at STEPS, regularised.
TABLE3_ROWS = {row: regularised(mini.miniature(row, STEPS)) for row in mini.table3.ROWS}

# Not in the paper: seeds 1 (and 2 for base), as experiments/table3_multi30k/sweep.py; seed 0 of every row first.
ROWS = mini.with_seeds(TABLE3_ROWS)

PAPER = mini.PAPER


def get_config(row: str = 'base') -> ml_collections.ConfigDict:
  if row not in ROWS:
    raise ValueError(f'unknown row {row!r}; the rows are: {", ".join(ROWS)}')
  config = mini.multi30k.get_config()
  config.update_from_flattened_dict({**BASE, **ROWS[row]})
  return config
