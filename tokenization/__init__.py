"""Vocabulary stage (SentencePiece) and token shards."""
