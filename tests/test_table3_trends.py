"""experiments/table3_multi30k/trends.py: the paper's own Table 3 shows all eight of its trends under
the script's rules, and a trend fails or waits when the rows say so."""

import json
import os

import pytest

from transformer_jax.config import loading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
trends = loading.load_module(
    os.path.join(REPO, 'experiments', 'table3_multi30k', 'trends.py'))
table3 = loading.import_sibling(__file__, '../configs/table3')


def _write_rows(directory, figures: dict, spread: float) -> None:
  """Two seeds per row at each row's (perplexity, BLEU) ± spread."""
  for row, (ppl, bleu) in figures.items():
    for name, sign in ((row, -1), (f'{row}_seed1', 1)):
      (directory / f'{name}.json').write_text(json.dumps(
          {'perplexity': ppl + sign * spread, 'bleu_tokenized': bleu + sign * spread}))


def test_the_papers_table_shows_its_own_trends(tmp_path):
  _write_rows(tmp_path, table3.PAPER, spread=0.06)
  rows = trends.load(tmp_path)
  assert rows['base'] == {'ppl': [4.92 - 0.06, 4.92 + 0.06], 'bleu': [25.8 - 0.06, 25.8 + 0.06],
                          'change': []}
  results = trends.trends(rows)
  assert len(results) == 8 and all(ok for _, ok in results), results
  assert '8 of the 8 decided trends reproduce' in trends.report(rows)


def test_a_reversed_row_fails_its_trend_and_a_missing_seed_leaves_it_pending(tmp_path):
  figures = dict(table3.PAPER)
  figures['A1'] = (4.50, 26.5)  # one head better than eight
  del figures['E']
  _write_rows(tmp_path, figures, spread=0.06)
  (tmp_path / 'B1_seed1.json').unlink()  # B1 with one seed: no spread to judge it by
  results = dict(trends.trends(trends.load(tmp_path)))
  assert results['1 head worse than 8 (A1 < base, BLEU and PPL)'] is False
  assert results['learned positions ≈ sinusoids (E ≈ base, BLEU and PPL)'] is None
  assert results['smaller d_k worse (B1, B2 < base, BLEU)'] is None
  assert results['too many heads worse (A4 < base, BLEU)'] is True


@pytest.mark.parametrize('spread, expected', [(0.01, True), (0.5, False)])
def test_a_difference_counts_only_beyond_the_seed_spread(tmp_path, spread, expected):
  # A4 is 0.4 BLEU below base: a trend with seeds 0.02 apart, noise with seeds 1.0 apart.
  _write_rows(tmp_path, table3.PAPER, spread)
  assert trends.better(trends.load(tmp_path), 'base', 'A4', 'bleu') is expected


def test_curves_hold_each_seeds_dev_perplexities_in_its_groups_panel(tmp_path):
  for name, curve in (('base', [(500, 9.0), (1000, 6.0)]),
                      ('base_seed1', [(500, 9.5), (1000, 6.1)]),
                      ('A1', [(500, 8.0), (1000, 5.9)]), ('big', [(500, 30.0), (12000, 5.6)])):
    (tmp_path / f'{name}.json').write_text(json.dumps(
        {'perplexity': curve[-1][1], 'bleu_tokenized': 30.0,
         'dev_curve': [{'step': s, 'perplexity': p} for s, p in curve]}))
  curves = trends.load_curves(tmp_path)
  assert curves['base'] == [[(500, 9.0), (1000, 6.0)], [(500, 9.5), (1000, 6.1)]]
  figure = trends.plot_curves(curves)
  heads, *_, last = figure.axes
  # base's two seeds in every panel, then the group's rows; a row's seeds share one colour.
  assert [list(line.get_ydata()) for line in heads.lines] == [[9.0, 6.0], [9.5, 6.1], [8.0, 5.9]]
  assert heads.lines[0].get_color() == heads.lines[1].get_color() == 'grey'
  assert [list(line.get_xdata()) for line in last.lines][-1] == [500, 12000]
  assert [t.get_text() for t in heads.get_legend().get_texts()] == ['base', 'A1']


def test_the_last_fifth_change_compares_the_end_with_the_evaluation_at_80_percent(tmp_path):
  # Evaluations every 500 steps to 10000: step 8000 is the last at or before 80%.
  falling = [(step, 20.0 - step / 1000) for step in range(500, 10001, 500)]  # 12.0 -> 10.0
  rising = [(500, 9.0), (1000, 8.0), (1500, 8.5), (2000, 8.8)]  # 80% of 2000: step 1500
  for name, curve in (('D1', rising), ('D1_seed1', falling)):
    (tmp_path / f'{name}.json').write_text(json.dumps(
        {'perplexity': curve[-1][1], 'bleu_tokenized': 30.0,
         'dev_curve': [{'step': s, 'perplexity': p} for s, p in curve]}))
  (tmp_path / 'D2.json').write_text(json.dumps(  # evaluated at its last step only
      {'perplexity': 7.0, 'bleu_tokenized': 30.0, 'dev_curve': [{'step': 20, 'perplexity': 7.0}]}))
  rows = trends.load(tmp_path)
  assert rows['D1']['change'] == pytest.approx([8.8 / 8.5 - 1, 10.0 / 12.0 - 1])
  assert rows['D2']['change'] == [] and '| D2 | 1 | 7.00 | 30.00 | – |' in trends.report(rows)
  # The report shows the seed that moved most: 10 / 12 - 1 = -16.7%.
  assert '| D1 | 2 | 9.40 (8.80–10.00) | 30.00 (30.00–30.00) | -16.7% |' in trends.report(rows)
