"""Test doubles for the LLM policy: a scripted chat model and a replaying OpenAI-compatible server."""
