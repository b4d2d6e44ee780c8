"""Problem families, compilation, the candidate runner and the verification backends."""
