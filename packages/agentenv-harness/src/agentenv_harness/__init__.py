"""agentenv-harness (in progress)."""
