"""Translating with a trained model (§6.1): greedy and beam search (`search`), over the model
(`decoding`), a run loaded from its workdir (`translator`) and BLEU (`bleu`)."""
