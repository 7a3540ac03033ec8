r"""Scores a trained workdir on a whole split as the paper did (§6.1): beam search, averaged
checkpoints, BLEU; and the per-token perplexity of Table 3.

  python -m transformer_jax.evaluate --workdir=DIR --split=test [--json] \
      [--beam_size=4] [--alpha=0.6] [--average_last=5] [--batch_size=64]

Every source sentence of the split is translated (one too long for the model is truncated,
with a warning). Reported, each labelled: sacreBLEU on detokenized text with its signature;
the paper's tokenized, compound-split, cased BLEU; the same lowercased (Multi30k papers' usual
figure); per-token perplexity of the references (pairs longer than config.data.max_length are
left out of it and counted); the number of sentences; decoding time. The translations go to
`DIR/eval/<name>.txt` and the figures to `DIR/eval/<name>.json`, where the name records the
split, checkpoints and decoding settings.
"""

import json
import sys

from absl import app, flags
import jax

from transformer_jax import config_lib, evaluation, translate

_SPLIT = flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Which split.')
_JSON = flags.DEFINE_boolean('json', False, 'Print the figures as one JSON object.')


def main(argv):
  config_lib.start_command(argv)
  try:
    result = evaluation.evaluate(translate.translator_from_flags(), translate.WORKDIR.value,
                                 _SPLIT.value)
  except (OSError, ValueError, RuntimeError) as e:
    sys.exit(f'error: {e}')
  if jax.process_index() == 0:
    print(json.dumps(result) if _JSON.value else evaluation.report(result), flush=True)


if __name__ == '__main__':
  app.run(main)
