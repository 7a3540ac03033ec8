"""Translating with a trained model (§6.1): greedy and beam search (`search`), over the model
(`batch_decode`), a run loaded from its workdir (`translator`), BLEU (`bleu`).

`dev_evaluation` scores the dev split during training.
"""
