"""The agents (planner, retriever, coder, reviewer) and their policies; the offline policy is the default."""
