r"""Multi30k task 1, English->German: a small Transformer for real data at CPU scale.

  python -m transformer_jax.train --config=configs/multi30k.py --workdir=WORKDIR \
      [--config.data.manual_dir=DIR] [--config.seed=N]
  python -m transformer_jax.evaluate --workdir=WORKDIR --split=test

The corpus is downloaded from the Multi30k repository; offline, DIR holds its raw task-1 files
(train, val, test_2016_flickr x en, de, gzipped: train.en.gz, ...). The model is the
published text-only Transformer baseline for this test set (4 layers, d_model 128, d_ff 256,
4 heads, dropout 0.3; evaluated with beam 5 and the last 10 checkpoints averaged), trained
with the paper's recipe (§3.1 post-norm, Adam and eq. 3, label smoothing 0.1, a joint BPE
vocabulary) and tensor2tensor v1's fused Q/K/V initialisation (the base config's default),
with which post-norm trains at this scale (experiments/postnorm/README.md).
The text is lowercased and Moses-tokenized before the vocabulary is learned, as the published
model's was (its 41.0 is lowercased BLEU), so `evaluate` reports lowercased BLEU only;
--config.data.preprocessing=none trains on the raw, cased text instead, as the base config
does. 29000 sentence pairs make 146 batches of 4096 tokens per side, so the 12000 steps are
about 82 epochs; a checkpoint every 200 steps (about 1.4 epochs), the last 10 kept for
averaging. Warmup is 1000 steps: the paper's 4000 would spend most of this run warming up.
Its results, over seeds and variants, and their commands: experiments/multi30k/README.md.
"""

import ml_collections

from transformer_jax.config import loading

base = loading.import_sibling(__file__, 'base')


def get_config() -> ml_collections.ConfigDict:
  config = base.get_config()
  config.update_from_flattened_dict({
      'data.dataset': 'multi30k',
      # As the published model's text (data/preprocessing.py); 'none' keeps the raw, cased text.
      'data.preprocessing': 'lowercase_moses',
      'data.vocab_size': 6000,  # joint BPE over 29k sentence pairs
      'data.max_length': 128,  # Multi30k's longest training pair has ~100 tokens
      'data.tokens_per_batch': 4096,
      'model.num_layers': 4,
      'model.d_model': 128,
      'model.d_ff': 256,
      'model.num_heads': 4,
      'model.d_k': 32,
      'model.d_v': 32,
      'model.dropout_rate': 0.3,
      'train.num_train_steps': 12000,  # longer runs: experiments/multi30k/README.md
      'train.warmup_steps': 1000,
      'train.eval_every_steps': 1000,
      'train.checkpoint_every_steps': 200,
      'train.keep_checkpoints': 10,
      # The projection and loss fused, 2 target positions at a time: the same sums and
      # gradients, the chunk size chosen by measurement on a CPU (docs/performance.md).
      'train.loss_chunk': 2,
      # On GPUs and TPUs, where every batch is packed into one shape, 20 steps a compiled call:
      # this small model's step is shorter than the host's launch of it. A CPU runs each step
      # as a call (its batches have several shapes); the steps are the same either way.
      'train.steps_per_call': 20,
      'decode.beam_size': 5,
      'decode.average_last': 10,
  })
  return config
