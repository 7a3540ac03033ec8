"""Translation data: datasets, tokenization and batching."""
