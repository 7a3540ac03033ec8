r"""Training curves of a workdir: training and dev loss, dev BLEU, and the learning rate.

  PYTHONPATH=. python experiments/plot_curves.py --workdir=DIR --output=curves.png

Reads `DIR/metrics.jsonl` (written by transformer_jax.train; a resumed run's repeated steps
count once). Losses are per target token: the label-smoothed training loss, and the dev
split's negative log-likelihood without smoothing (ln of its perplexity).
"""

import os

from absl import app, flags
import matplotlib

from transformer_jax import metrics_log

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

_WORKDIR = flags.DEFINE_string('workdir', None, 'A training workdir.', required=True)
_OUTPUT = flags.DEFINE_string('output', None, 'The PNG to write.', required=True)


def plot(records: list[dict], title: str) -> matplotlib.figure.Figure:
  """Three panels against the step: losses, dev BLEU (if logged), learning rate."""
  train = [r for r in records if r['split'] == 'train']
  dev = [r for r in records if r['split'] == 'validation']
  figure, (losses, bleu, rate) = plt.subplots(3, 1, figsize=(7, 9), sharex=True)
  losses.plot([r['step'] for r in train], [r['loss'] for r in train],
              label='train loss (label-smoothed)')
  losses.plot([r['step'] for r in dev], [r['nll'] for r in dev], 'o-', label='dev NLL')
  losses.set_ylabel('nats per token')
  losses.legend()
  scored = [r for r in dev if 'bleu' in r]
  bleu.plot([r['step'] for r in scored], [r['bleu'] for r in scored], 'o-')
  if not scored:
    bleu.text(0.5, 0.5, 'no dev BLEU logged', ha='center', transform=bleu.transAxes)
  bleu.set_ylabel('dev BLEU (sacreBLEU)')
  rate.plot([r['step'] for r in train], [r['learning_rate'] for r in train])
  rate.set_ylabel('learning rate')
  rate.set_xlabel('step')
  for ax in (losses, bleu, rate):
    ax.grid(alpha=0.3)
  losses.set_title(title)
  figure.tight_layout()
  return figure


def main(argv):
  del argv
  path = os.path.join(_WORKDIR.value, 'metrics.jsonl')
  if not os.path.isfile(path):
    raise app.UsageError(f'{path} not found: --workdir must be a training workdir')
  figure = plot(metrics_log.read(path), os.path.basename(os.path.normpath(_WORKDIR.value)))
  figure.savefig(_OUTPUT.value, dpi=120)


if __name__ == '__main__':
  app.run(main)
