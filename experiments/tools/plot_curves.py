r"""Training curves of one or more workdirs: training and dev loss, dev BLEU, and the learning
rate, several runs overlaid for comparison.

  python experiments/tools/plot_curves.py --workdir=DIR[,DIR2,...] --output=curves.png

Reads `DIR/metrics.jsonl` (written by transformer_jax.train; a resumed run's repeated steps
count once). Losses are per target token: the label-smoothed training loss, and the dev
split's negative log-likelihood without smoothing (ln of its perplexity).
"""

import os

from absl import app, flags
import matplotlib

from transformer_jax.training import metrics_log

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position


def plot(runs: dict[str, list[dict]], title: str = '') -> matplotlib.figure.Figure:
  """Three panels against the step, one line per run in each (its name in the legend):
  losses (training loss solid, dev NLL with markers), dev BLEU (where logged), learning rate."""
  figure, (losses, bleu, rate) = plt.subplots(3, 1, figsize=(7, 9), sharex=True)
  for name, records in runs.items():
    train = [r for r in records if r['split'] == 'train']
    dev = [r for r in records if r['split'] == 'validation']
    line, = losses.plot([r['step'] for r in train], [r['loss'] for r in train],
                        label=f'{name}: train loss (label-smoothed)')
    losses.plot([r['step'] for r in dev], [r['nll'] for r in dev], 'o--', color=line.get_color(),
                label=f'{name}: dev NLL')
    scored = [r for r in dev if 'bleu' in r]
    if scored:
      bleu.plot([r['step'] for r in scored], [r['bleu'] for r in scored], 'o-',
                color=line.get_color(), label=name)
    rate.plot([r['step'] for r in train], [r['learning_rate'] for r in train],
              color=line.get_color(), label=name)
  losses.set_ylabel('nats per token')
  losses.legend(fontsize='small')
  if bleu.lines:
    bleu.legend(fontsize='small')
  else:
    bleu.text(0.5, 0.5, 'no dev BLEU logged', ha='center', transform=bleu.transAxes)
  bleu.set_ylabel('dev BLEU (sacreBLEU)')
  rate.set_ylabel('learning rate')
  rate.set_xlabel('step')
  for ax in (losses, bleu, rate):
    ax.grid(alpha=0.3)
  losses.set_title(title)
  figure.tight_layout()
  return figure


def main(argv):
  del argv
  runs = {}
  for workdir in _WORKDIRS.value:
    path = os.path.join(workdir, 'metrics.jsonl')
    if not os.path.isfile(path):
      raise app.UsageError(f'{path} not found: --workdir must be a training workdir')
    runs[os.path.basename(os.path.normpath(workdir))] = metrics_log.read(path)
  figure = plot(runs, next(iter(runs)) if len(runs) == 1 else '')
  figure.savefig(_OUTPUT.value, dpi=120)


if __name__ == '__main__':
  _WORKDIRS = flags.DEFINE_list('workdir', None, 'One training workdir, or several separated by '
                                 'commas to overlay their curves.', required=True)
  _OUTPUT = flags.DEFINE_string('output', None, 'The PNG to write.', required=True)
  app.run(main)
