r"""Why the paper's post-norm Transformer stalls on Multi30k, one change at a time.

  python -m transformer_jax.sweep --sweep=experiments/postnorm/sweep.py \
      --workdir=/tmp/postnorm --results=experiments/postnorm/rows --rows=post_fused

The model is configs/multi30k.py (the published baseline's sizes: N 4, d_model 128, d_ff 256,
h 4, P_drop 0.3) with §3.1's post-norm and W^Q, W^K, W^V drawn separately (the stalled runs'
initialisation, pinned here), trained with the paper's recipe (eq. 3 with warmup
1000, so a peak of 0.0028; batches of 4096 + 4096 tokens; Adam ε 1e-9). Each row changes one
thing that a public fairseq run of the same post-norm model, which reaches 41.0 test BLEU,
does differently:
  post              nothing: the recipe as it is (the first post-norm Multi30k run, experiments/multi30k/README.md's attempt 1, ran it for 9000 steps);
  post_fused        W^Q, W^K, W^V drawn as blocks of tensor2tensor v1's fused projections,
                    variance 1/(2·d_model) in self-attention (fairseq: the same variance);
  post_bias         biases on the four attention projections (fairseq, tensor2tensor v1);
  post_fairseq_lr   fairseq's schedule: linear warmup to 0.005 at step 2000, then
                    0.005·sqrt(2000/step), which is eq. 3 with warmup 2000 times 2.53;
  post_fairseq_batch twice the tokens per update (8192 + 8192 tokens with padding,
                    by arithmetic about 6300 real target tokens; fairseq's about 7100);
  post_fairseq_all  the four together;
and the _seed1 rows repeat a row with another seed (initialisation, dropout, batch order).
`pre` is the pre-norm model of the earlier configs/multi30k.py at the same cadence, the target.
Every row: 4000 steps, dev perplexity every 500 steps (BLEU is not computed during
training; the runner scores the last checkpoint with beam 4 at the end). Measured on a 2-core
Intel Xeon: about 0.67 s per step (4680 target tokens/s), so a row takes about 47 minutes of
training and under a minute of evaluation (post_fairseq_batch and post_fairseq_all, by
arithmetic, about twice that).

Results and the conclusion: experiments/postnorm/README.md.
"""

import os

import ml_collections

from transformer_jax.config import loading

multi30k = loading.import_sibling(__file__, '../../configs/multi30k')

# As in experiments/table3_multi30k/sweep.py: the raw files beside the repository if there, else a download.
MULTI30K = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                         '..', 'shared', 'data', 'multi30k'))

BASE = {
    'data.manual_dir': MULTI30K if os.path.isdir(MULTI30K) else None,
    'data.preprocessing': 'none',  # the raw, cased text the stalled runs had
    'model.norm_position': 'post',
    'model.qkv_init': 'separate',  # the initialisation the stalled runs had
    'model.decoder_start': 'learned',  # the start vector they had
    'train.num_train_steps': 4000,
    'train.eval_every_steps': 500,
    'train.eval_bleu': False,
    'train.checkpoint_every_steps': 500,
    'train.keep_checkpoints': 1,
    'decode.average_last': 1,
}
FUSED = {'model.qkv_init': 'fused'}

ROWS = {
    'post': {},
    'post_seed1': {'seed': 1},
    'post_fused': FUSED,
    'post_fused_seed1': {**FUSED, 'seed': 1},
    'post_bias': {'model.attention_bias': True},
    'post_fairseq_lr': {'train.warmup_steps': 2000, 'train.lr_scale': 2.53},
    'post_fairseq_batch': {'data.tokens_per_batch': 8192},
    'post_fairseq_all': {**FUSED, 'model.attention_bias': True, 'train.warmup_steps': 2000,
                         'train.lr_scale': 2.53, 'data.tokens_per_batch': 8192},
    'pre': {'model.norm_position': 'pre'},
}


def get_config(row: str = 'post') -> ml_collections.ConfigDict:
  if row not in ROWS:
    raise ValueError(f'unknown row {row!r}; the rows are: {", ".join(ROWS)}')
  config = multi30k.get_config()
  config.update_from_flattened_dict({**BASE, **ROWS[row]})
  return config
