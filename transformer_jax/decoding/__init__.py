"""Translating with a trained model (§6.1): greedy and beam search (`search`), over the model
(`decoding`), a run loaded from its workdir (`translator`), BLEU (`bleu`).

`evaluator` scores the dev split during training.
"""
