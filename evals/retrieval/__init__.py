"""Retrieval evaluation: labelled queries and their recall and MRR against the knowledge-base index."""
